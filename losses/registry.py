"""Loss names -> (Keras loss, spreadout weight): the objectives of the experiments."""

import dataclasses
from typing import Optional, Tuple

import tensorflow as tf

from losses import retrieval_losses

# The named objectives; `<base>_spreadout` adds the spreadout regularizer.
LOSS_NAMES: Tuple[str, ...] = ("batch_softmax", "batch_softmax_spreadout",
                               "hinge", "hinge_spreadout", "global_softmax")
DEFAULT_SPREADOUT_WEIGHT = 1.0


@dataclasses.dataclass(frozen=True)
class Objective:
  """What a model is trained on: a loss over its scores plus spreadout on its table."""
  name: str
  loss: tf.keras.losses.Loss
  spreadout_weight: float


def make_loss(base_name: str, temperature: float = 0.05,
              margin: float = 0.9) -> tf.keras.losses.Loss:
  if base_name == "batch_softmax":
    return retrieval_losses.BatchSoftmaxLoss(temperature)
  if base_name == "global_softmax":
    return retrieval_losses.GlobalSoftmaxLoss(temperature)
  if base_name == "hinge":
    return retrieval_losses.HingeLoss(margin)
  raise ValueError(f"--loss: unknown loss '{base_name}'; choose one of "
                   f"{', '.join(LOSS_NAMES)}")


def base_loss_name(name: str) -> str:
  """The loss part of an objective name ('hinge_spreadout' -> 'hinge')."""
  if name not in LOSS_NAMES:
    raise ValueError(f"--loss: unknown loss '{name}'; choose one of "
                     f"{', '.join(LOSS_NAMES)}")
  return name[:-len("_spreadout")] if name.endswith("_spreadout") else name


def objective(name: str, spreadout_weight: Optional[float] = None,
              temperature: float = 0.05, margin: float = 0.9) -> Objective:
  """The named objective. `spreadout_weight` (default 1.0) is only for `*_spreadout`."""
  base_name = base_loss_name(name)
  uses_spreadout = base_name != name
  if spreadout_weight is not None:
    if spreadout_weight < 0:
      raise ValueError(f"--spreadout_weight must be >= 0, got {spreadout_weight}")
    if not uses_spreadout and spreadout_weight > 0:
      raise ValueError(f"--spreadout_weight is for the *_spreadout losses; "
                       f"--loss={name} has none (use {name}_spreadout)"
                       if f"{name}_spreadout" in LOSS_NAMES else
                       f"--spreadout_weight is for the *_spreadout losses, not "
                       f"--loss={name}")
  weight = 0.0
  if uses_spreadout:
    weight = DEFAULT_SPREADOUT_WEIGHT if spreadout_weight is None else spreadout_weight
  return Objective(name, make_loss(base_name, temperature, margin), float(weight))
