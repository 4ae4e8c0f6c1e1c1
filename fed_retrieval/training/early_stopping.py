"""When a run has converged: its best validation evaluation lies `patience` back.

One rule serves every loop (federated rounds, centralized steps) and every
task family, so runs are compared at convergence. A run evaluates its model on
the validation split every so often; an evaluation *improves* when it beats the
current best by more than `min_improvement_se` standard errors of the
difference, paired over the validation units (points or users) both models were
scored on (`evaluation.units`): the noise of the validation metric itself, so one setting
serves 61 validation users and 5,000 validation points. Only an improving
evaluation becomes the best, and the best is the model a run reports.

The run stops once `patience` evaluations have followed the best and the last
evaluation is not a record of the raw curve, so a stop never fires at a new
best (not even one within the noise). With `smoothing` w > 1 it also waits
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
  improved: bool  # Whether it became the best.


Curve = Sequence[Evaluation]


@dataclasses.dataclass(frozen=True)
class StoppingRule:
  """Stop `patience` evaluations after the best (None: never stop early)."""
  patience: Optional[int] = 5
  min_improvement_se: float = 1.0
  smoothing: int = 1

  def __post_init__(self):
    if self.patience is not None and self.patience < 1:
      raise ValueError(f"--patience must be >= 1, got {self.patience}")
    if self.min_improvement_se < 0:
      raise ValueError(f"--min_improvement_se must be >= 0, got {self.min_improvement_se}")
    if self.smoothing < 1:
      raise ValueError(f"--smoothing must be >= 1, got {self.smoothing}")

  @classmethod
  def from_flags(cls, patience: int, min_improvement_se: float,
                 smoothing: int = 1) -> "StoppingRule":
    """--patience N (0: never stop early, train the whole budget),
    --min_improvement_se, --smoothing."""
    if patience < 0:
      raise ValueError(f"--patience must be >= 0, got {patience}")
    return cls(patience or None, min_improvement_se, smoothing)

  def improves(self, new: Units, best: Optional[Units]) -> bool:
    """Whether an evaluation with `new` units beats the best's beyond the noise."""
    if best is None:
      return True
    gain, error = paired_gain(new, best)
    return gain > 0 and gain > self.min_improvement_se * error

  def best(self, curve: Curve) -> Evaluation:
    """The best evaluation: the last that improved (the model a run reports)."""
    improved = [e for e in curve if e.improved]
    if not improved:
      raise ValueError("No evaluation yet")
    return improved[-1]

  def should_stop(self, curve: Curve) -> bool:
    """True once `patience` evaluations followed the best, the last is no
    record of the raw curve, and (smoothing) the trailing means' best is as far
    back."""
    if self.patience is None or not curve:
      return False
    values = [e.value for e in curve]
    if values[-1] > max(values[:-1], default=-math.inf):
      return False
    if len(curve) - 1 - _last_index(curve, self.best(curve)) < self.patience:
      return False
    if self.smoothing == 1:
      return True
    smoothed = self.smoothed(values)
    return len(smoothed) - 1 - int(np.argmax(smoothed)) >= self.patience

  def smoothed(self, values: Sequence[float]) -> List[float]:
    """Each evaluation's value as the mean of the last `smoothing` ones."""
    return [float(np.mean(values[max(0, i + 1 - self.smoothing):i + 1]))
            for i in range(len(values))]


def _last_index(curve: Curve, evaluation: Evaluation) -> int:
  return max(i for i, e in enumerate(curve) if e is evaluation)
