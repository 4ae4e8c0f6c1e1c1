"""When a run has converged: its last gain beyond the noise lies `patience` back.

One rule serves every loop (federated rounds, centralized steps) and every
task family, so runs are compared at convergence. A run evaluates its model on
the validation split every so often; an evaluation is a *gain* when it beats
the last gain by more than `min_improvement_se` standard errors of the
difference, paired over the validation units (points or users) both models were
scored on (`evaluation.units`): the noise of the validation metric itself, so one setting
serves 61 validation users and 5,000 validation points.

The run stops once `patience` evaluations have followed the last gain and the
last evaluation is not a record of the raw curve, so a stop never fires at a
new best (not even one within the noise). Which model it reports is a separate
choice, `report_model`: the last gain (`last_gain`), or the highest
validation value (`maximum`), which a curve rising in steps each within the
noise reaches after its last gain. With `smoothing` w > 1 it also waits
until the trailing mean of w evaluations has not risen for `patience`
evaluations: smoothing can delay a stop, never cause one. The curve (each
evaluation's value and whether it improved) is all the state there is besides
the best's units, so a resumed run rebuilds it from its metrics file.
"""

import dataclasses
import math
from typing import List, NamedTuple, Optional, Sequence

import numpy as np

from fed_retrieval.evaluation.units import Units
from fed_retrieval.evaluation.units import paired_gain

class Evaluation(NamedTuple):
  """One point of a validation curve."""
  step: int  # The round or step evaluated.
  value: float
  improved: bool  # Whether it was a gain (beyond the noise of the last gain).


Curve = Sequence[Evaluation]


REPORTED_MODELS = ("last_gain", "maximum")
# The fields (and flags) of a loop's config that make its rule.
STOPPING_FIELDS = ("patience", "min_improvement_se", "smoothing", "report_model")


def stopping_fields(config) -> dict:
  """{field: value} of a loop config's STOPPING_FIELDS."""
  return {name: getattr(config, name) for name in STOPPING_FIELDS}


@dataclasses.dataclass(frozen=True)
class StoppingRule:
  """Stop `patience` evaluations after the last gain (None: never stop early);
  report the model `report_model` names."""
  patience: Optional[int] = 5
  min_improvement_se: float = 1.0
  smoothing: int = 1
  report_model: str = "last_gain"

  def __post_init__(self):
    if self.patience is not None and self.patience < 1:
      raise ValueError(f"--patience must be >= 1, got {self.patience}")
    if self.min_improvement_se < 0:
      raise ValueError(f"--min_improvement_se must be >= 0, got {self.min_improvement_se}")
    if self.smoothing < 1:
      raise ValueError(f"--smoothing must be >= 1, got {self.smoothing}")
    if self.report_model not in REPORTED_MODELS:
      raise ValueError(f"--report_model must be one of {', '.join(REPORTED_MODELS)}, "
                       f"got {self.report_model}")

  @classmethod
  def from_flags(cls, patience: int, min_improvement_se: float,
                 smoothing: int = 1, report_model: Optional[str] = None
                 ) -> "StoppingRule":
    """--patience N (0: never stop early, train the whole budget),
    --min_improvement_se, --smoothing, --report_model (None: last_gain)."""
    if patience < 0:
      raise ValueError(f"--patience must be >= 0, got {patience}")
    return cls(patience or None, min_improvement_se, smoothing, report_model or "last_gain")

  def improves(self, new: Units, last_gain: Optional[Units]) -> bool:
    """Whether an evaluation with `new` units beats the last gain's beyond the noise."""
    if last_gain is None:
      return True
    gain, error = paired_gain(new, last_gain)
    return gain > 0 and gain > self.min_improvement_se * error

  def last_gain(self, curve: Curve) -> int:
    """The index in `curve` of its last gain (where patience counts from)."""
    gains = [i for i, e in enumerate(curve) if e.improved]
    if not gains:
      raise ValueError("No evaluation yet")
    return gains[-1]

  def best(self, curve: Curve) -> Evaluation:
    """The evaluation whose model a run reports: its last gain, or its first
    highest value (`report_model`)."""
    if self.report_model == "maximum":
      if not curve:
        raise ValueError("No evaluation yet")
      return max(curve, key=lambda e: e.value)  # The first of equals.
    return curve[self.last_gain(curve)]

  def should_stop(self, curve: Curve) -> bool:
    """True once `patience` evaluations followed the last gain, the last is no
    record of the raw curve, and (smoothing) the trailing means' best is as far
    back."""
    if self.patience is None or not curve:
      return False
    values = [e.value for e in curve]
    if values[-1] > max(values[:-1], default=-math.inf):
      return False
    if len(curve) - 1 - self.last_gain(curve) < self.patience:
      return False
    if self.smoothing == 1:
      return True
    smoothed = self.smoothed(values)
    return len(smoothed) - 1 - int(np.argmax(smoothed)) >= self.patience

  def smoothed(self, values: Sequence[float]) -> List[float]:
    """Each evaluation's value as the mean of the last `smoothing` ones."""
    return [float(np.mean(values[max(0, i + 1 - self.smoothing):i + 1]))
            for i in range(len(values))]
