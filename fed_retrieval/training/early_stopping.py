"""When a run has converged: validation recall that stopped improving.

One rule serves centralized and federated training, so both are compared at
convergence: a run evaluates on the validation users every so often (rounds
or steps), and stops once `patience` evaluations in a row have not beaten the
best one by more than a fraction `min_delta` of it (relative, so one setting
serves a curve at 0.5% and one at 10%), or at its cap. The model
it reports is the one of the best evaluation. The curve is all the state there
is, so a resumed run rebuilds it from its metrics file.

A noisy curve (a few hundred validation points: one evaluation moves by a
couple of points) can stop a run at an early lucky evaluation. `smoothing` w
compares trailing means of the last w evaluations instead of single ones to
decide when to stop; the reported model is still the best single evaluation.
"""

import dataclasses
import math
from typing import List, Optional, Sequence, Tuple

Curve = Sequence[Tuple[int, float]]  # (round or step, validation recall)


@dataclasses.dataclass(frozen=True)
class StoppingRule:
  """Stop after `patience` evaluations without an improvement > `min_delta` x best.

  `patience` None never stops early (a fixed budget: the cap).
  """
  patience: Optional[int] = 4
  min_delta: float = 0.0
  smoothing: int = 1

  def __post_init__(self):
    if self.patience is not None and self.patience < 1:
      raise ValueError(f"--patience must be >= 1, got {self.patience}")
    if self.min_delta < 0:
      raise ValueError(f"--min_delta must be >= 0, got {self.min_delta}")
    if self.smoothing < 1:
      raise ValueError(f"--smoothing must be >= 1, got {self.smoothing}")

  @classmethod
  def from_flags(cls, patience: int, min_delta: float,
                 smoothing: int = 1) -> "StoppingRule":
    """--patience N (0: never stop early, train the whole budget), --min_delta,
    --smoothing."""
    if patience < 0:
      raise ValueError(f"--patience must be >= 0, got {patience}")
    return cls(patience or None, min_delta, smoothing)

  def smoothed(self, curve: Curve) -> List[Tuple[int, float]]:
    """Each evaluation's value as the mean of the last `smoothing` ones."""
    values = [value for _, value in curve]
    return [(round_num, sum(values[max(0, i + 1 - self.smoothing):i + 1]) /
             (i + 1 - max(0, i + 1 - self.smoothing)))
            for i, (round_num, _) in enumerate(curve)]

  def best(self, curve: Curve) -> Tuple[int, float]:
    """The (round, value) of the best single evaluation: the model a run
    reports. The first to beat all earlier ones by more than `min_delta` x
    their best, so ties and noise keep the earlier model."""
    return _first_best(curve, self.min_delta)

  def should_stop(self, curve: Curve) -> bool:
    """True once the last `patience` evaluations came after the best one (of
    the smoothed curve)."""
    if self.patience is None or not curve:
      return False
    best_round, _ = _first_best(self.smoothed(curve), self.min_delta)
    after_best = sum(1 for round_num, _ in curve if round_num > best_round)
    return after_best >= self.patience


def _first_best(curve: Curve, min_delta: float) -> Tuple[int, float]:
  best_round, best_value = None, -math.inf
  for round_num, value in curve:
    if best_round is None or value > best_value * (1.0 + min_delta):
      best_round, best_value = round_num, value
  if best_round is None:
    raise ValueError("No evaluation yet")
  return best_round, best_value
