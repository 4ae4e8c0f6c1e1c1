"""A run's validation curve and its best model, as every training loop keeps them.

`ValidationCurve` takes each evaluation (the job's metrics with the `Units` of
the monitored one), asks the stopping rule whether it is a gain on the last
gain (whose units it keeps under the run's `best/` directory), saves the
weights of the model the rule would report there, and says when the run may
stop: never before `min_step` (the minimum budget), then as the rule says. A
resumed run rebuilds the curve from its metrics file (the `improved` column)
and reads the last gain's units back from `best/`.
"""

import csv
import os
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from fed_retrieval.training import early_stopping
from fed_retrieval.evaluation import units as units_lib
from fed_retrieval.evaluation.units import Units
from fed_retrieval.training.early_stopping import Evaluation

BEST_WEIGHTS = os.path.join("best", "weights")
IMPROVED = "improved"  # The metrics column (0/1) that records gains.


def _units_path(output_dir: str, step: int) -> str:
  return os.path.join(output_dir, "best", f"units-{step}.npz")


def read_curve(metrics_path: str, prefix: str, monitored: str,
               step_of: Callable[[Dict[str, str]], int], last: float
               ) -> List[Evaluation]:
  """The curve of a metrics file's evaluations through step `last`: column
  `<prefix>_<monitored>` and `<prefix>_improved`, the step `step_of(row)`."""
  curve = []
  if not os.path.isfile(metrics_path):
    return curve
  with open(metrics_path) as f:
    for row in csv.DictReader(f):
      if row.get(f"{prefix}_{monitored}") and step_of(row) <= last:
        curve.append(Evaluation(step_of(row), float(row[f"{prefix}_{monitored}"]),
                                row.get(f"{prefix}_{IMPROVED}") == "1"))
  return curve


class ValidationCurve:
  """The curve of one run: evaluations, the reported one and the stop."""

  def __init__(self, rule: early_stopping.StoppingRule, output_dir: str,
               curve: List[Evaluation], min_step: int = 0):
    self.rule = rule
    self.curve = list(curve)
    self._output_dir = output_dir
    self._min_step = min_step
    self._last_gain_units: Optional[Units] = None
    if any(e.improved for e in self.curve):
      last_gain = self.curve[rule.last_gain(self.curve)].step
      with np.load(_units_path(output_dir, last_gain)) as saved:
        self._last_gain_units = Units(saved["numerators"], saved["weights"])

  @property
  def best_step(self) -> int:
    return self.rule.best(self.curve).step

  @property
  def latest(self) -> Optional[float]:
    return self.curve[-1].value if self.curve else None

  def record(self, step: int, evaluation: Dict[str, Any], monitored: str,
             model: tf.keras.Model) -> Dict[str, float]:
    """Adds an evaluation of `model` at `step`; keeps the model if the rule
    would now report it. Returns its metrics with `improved` (0/1: a gain)."""
    metrics, units = units_lib.split_units(evaluation)
    if units is None:
      raise ValueError(f"the evaluation of {monitored} returned no units")
    improved = self.rule.improves(units, self._last_gain_units)
    self.curve.append(Evaluation(step, metrics[monitored], improved))
    if self.rule.best(self.curve) is self.curve[-1]:
      model.save_weights(os.path.join(self._output_dir, BEST_WEIGHTS))
    if improved:
      self._last_gain_units = units
      os.makedirs(os.path.dirname(_units_path(self._output_dir, step)), exist_ok=True)
      np.savez(_units_path(self._output_dir, step), numerators=units.numerators,
               weights=units.weights)
    return {**metrics, IMPROVED: int(improved)}

  def should_stop(self, step: int) -> bool:
    """Whether the run may stop after `step`: past the minimum and as the rule says."""
    return step >= self._min_step and self.rule.should_stop(self.curve)

  def restore_best(self, model: tf.keras.Model) -> int:
    """Loads the reported evaluation's weights into `model`; returns its step."""
    model.load_weights(os.path.join(self._output_dir, BEST_WEIGHTS))
    return self.best_step


TEST_UNITS = "test_units.npz"


def test_metrics(evaluation: Dict[str, Any], monitored: str,
                 output_dir: str) -> Dict[str, float]:
  """A test evaluation's metrics with `<monitored>_se`, its standard error over
  the test units; the units saved in the run's `TEST_UNITS` (for paired
  standard errors of the differences between runs)."""
  units = evaluation.get(units_lib.UNITS)
  if units is not None:
    np.savez(os.path.join(output_dir, TEST_UNITS), numerators=units.numerators,
             weights=units.weights)
  return units_lib.with_standard_error(evaluation, monitored)


def read_test_units(run_dir: str) -> Units:
  """The test units a finished run saved."""
  with np.load(os.path.join(run_dir, TEST_UNITS)) as saved:
    return Units(saved["numerators"], saved["weights"])
