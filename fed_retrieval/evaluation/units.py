"""A metric per evaluation unit (a point or a user), for standard errors.

Every evaluation that a stopping rule or a comparison reads returns, beside
its metrics, the `Units` of its headline metric under the key `UNITS`: the
metric's numerator and weight per unit. From them come the metric's standard
error over units and, for two models scored on the same units, the standard
error of their difference (paired: far smaller than either's when the two err
on the same units).
"""

import math
from typing import Any, Dict, NamedTuple, Optional, Tuple

import numpy as np

# The key under which an evaluation returns the `Units` of its monitored metric.
UNITS = "units"


class Units(NamedTuple):
  """A metric per validation unit: its value is sum(numerators) / sum(weights).

  P@1 or accuracy over points: each point's hit, weight 1. Recall over users:
  each user's hits, weighted by the user's examples (a user's examples are
  not independent, so the unit is the user).
  """
  numerators: np.ndarray
  weights: np.ndarray

  @property
  def value(self) -> float:
    return float(np.sum(self.numerators) / np.sum(self.weights))

  def standard_error(self) -> float:
    """The standard error of the value over units (a ratio estimator's)."""
    return _ratio_standard_error(np.asarray(self.numerators, np.float64), self.weights)


def per_point(values: np.ndarray) -> Units:
  """Units of a mean over points (each point its own unit)."""
  values = np.asarray(values, np.float64)
  return Units(values, np.ones_like(values))


def per_group(values: np.ndarray, groups: np.ndarray) -> Units:
  """Units of a mean over examples that belong to groups (users): each group's
  sum, weighted by its examples."""
  _, index = np.unique(np.asarray(groups), return_inverse=True)
  return Units(np.bincount(index, weights=np.asarray(values, np.float64)),
               np.bincount(index).astype(np.float64))


def _ratio_standard_error(numerators: np.ndarray, weights: np.ndarray) -> float:
  count = len(weights)
  if count < 2:
    return 0.0
  total = float(np.sum(weights))
  residuals = numerators - (np.sum(numerators) / total) * weights
  return math.sqrt(count / (count - 1) * float(np.sum(residuals ** 2))) / total


def paired_gain(new: Units, best: Units) -> Tuple[float, float]:
  """(new value - best value, its standard error) over the same units."""
  if len(new.weights) != len(best.weights) or not np.array_equal(new.weights,
                                                                 best.weights):
    raise ValueError("two evaluations of the stopping rule are on different "
                     "validation units")
  difference = np.asarray(new.numerators, np.float64) - best.numerators
  return (float(np.sum(difference) / np.sum(new.weights)),
          _ratio_standard_error(difference, np.asarray(new.weights, np.float64)))


def split_units(metrics: Dict[str, Any]) -> Tuple[Dict[str, float], Optional[Units]]:
  """An evaluation's metrics without its units, and the units (None if absent)."""
  metrics = dict(metrics)
  return metrics, metrics.pop(UNITS, None)


def with_standard_error(evaluation: Dict[str, Any], monitored: str) -> Dict[str, Any]:
  """The evaluation's metrics, its units replaced by `<monitored>_se`."""
  metrics, units = split_units(evaluation)
  if units is not None:
    metrics[f"{monitored}_se"] = units.standard_error()
  return metrics


RESAMPLES = 2000


def relative_drop(reference: Units, other: Units, resamples: int = RESAMPLES,
                  seed: int = 0) -> Tuple[float, float]:
  """(drop, standard error) of `other`'s value relative to `reference`'s:
  (reference - other) / reference, its standard error from a bootstrap over
  the units both were scored on, paired (every draw scores both on the same
  units: far smaller than either value's error when the two err on the same
  units). Draws where the reference is 0 are left out."""
  paired_gain(other, reference)  # Refuses other units.
  drop = (reference.value - other.value) / reference.value
  draws = np.random.default_rng(seed).multinomial(
      len(reference.weights), np.full(len(reference.weights), 1 / len(reference.weights)),
      size=resamples)
  totals = draws @ np.asarray(reference.weights, np.float64)
  references = draws @ np.asarray(reference.numerators, np.float64) / totals
  others = draws @ np.asarray(other.numerators, np.float64) / totals
  kept = references > 0
  drops = (references[kept] - others[kept]) / references[kept]
  return float(drop), float(np.std(drops, ddof=1))
