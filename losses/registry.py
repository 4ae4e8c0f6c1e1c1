"""Loss names -> objectives (a Keras loss plus where and how much spreadout).

`<base>_spreadout` adds spreadout (losses/spreadout.py). Unless told otherwise
it is the paper's H+S regularizer, the Frobenius form on the item table at
`DEFAULT_ITEM_SPREADOUT_WEIGHT` (README, "How the defaults were chosen"), and
for H+S also the negative term at `DEFAULT_NEGATIVE_SPREADOUT_WEIGHTS`.
"""

import dataclasses
from typing import Optional, Tuple

import tensorflow as tf

from losses import retrieval_losses
from losses.spreadout import SpreadoutWeights

LOSS_NAMES: Tuple[str, ...] = ("batch_softmax", "batch_softmax_spreadout",
                               "hinge", "hinge_spreadout", "global_softmax")
DEFAULT_ITEM_SPREADOUT_WEIGHT = 0.1
# H+S's negative term (losses/spreadout.py, `negative`): 0.69 -> 1.0 of global
# softmax's centralized recall on ml-latest-small.
# BS + spreadout stays the paper's (item table only): its in-batch negatives
# are what the comparison is about.
DEFAULT_NEGATIVE_SPREADOUT_WEIGHTS = {"hinge_spreadout": 0.1}
DEFAULT_HINGE_POWER = 2
# Above 1, the squared hinge on cosines always pulls (harder the further the
# positive): 13% better H+S on ml-latest-small than the paper's 0.9, as good
# on `ml1m`.
DEFAULT_MARGIN = 1.5


@dataclasses.dataclass(frozen=True)
class Objective:
  """What a model is trained on: a loss over its scores (with any cross spreadout)
  plus the spreadout the model adds on its item table and context embeddings.

  `loss.candidates` says which scores the loss takes: "batch" (each context
  against the batch's positives, [B, B]) wherever it reads nothing else (batch
  softmax, the hinge, without the negative term), else "vocabulary" ([B, V]);
  `dual_encoder.training_model` builds the model that gives them.
  """
  name: str
  loss: tf.keras.losses.Loss
  spreadout: SpreadoutWeights

  @property
  def candidates(self) -> str:
    return self.loss.candidates


def make_loss(base_name: str, temperature: float = 0.05,
              margin: float = DEFAULT_MARGIN,
              hinge_power: int = DEFAULT_HINGE_POWER,
              spreadout: SpreadoutWeights = SpreadoutWeights(),
              candidates: str = "vocabulary") -> tf.keras.losses.Loss:
  cross = {"cross_spreadout_weight": spreadout.cross,
           "negative_spreadout_weight": spreadout.negative,
           "negative_margin": spreadout.negative_margin,
           "spreadout_form": spreadout.form, "candidates": candidates}
  if base_name == "batch_softmax":
    return retrieval_losses.BatchSoftmaxLoss(temperature, **cross)
  if base_name == "global_softmax":
    return retrieval_losses.GlobalSoftmaxLoss(temperature, **cross)
  if base_name == "hinge":
    return retrieval_losses.HingeLoss(margin, hinge_power, **cross)
  raise ValueError(f"--loss: unknown loss '{base_name}'; choose one of "
                   f"{', '.join(LOSS_NAMES)}")


def base_loss_name(name: str) -> str:
  """The loss part of an objective name ('hinge_spreadout' -> 'hinge')."""
  if name not in LOSS_NAMES:
    raise ValueError(f"--loss: unknown loss '{name}'; choose one of "
                     f"{', '.join(LOSS_NAMES)}")
  return name[:-len("_spreadout")] if name.endswith("_spreadout") else name


def takes_spreadout(name: str) -> bool:
  """Whether objective `name` is a `*_spreadout` one."""
  return base_loss_name(name) != name


def spreadout_for(name: str, spreadout: Optional[SpreadoutWeights] = None
                  ) -> SpreadoutWeights:
  """The spreadout of objective `name`: the given one, or the default.

  Only `*_spreadout` objectives take spreadout; for them, `None` means the
  paper's form on the item table at the default weight, plus the objective's
  default negative term, which also fills a given `negative` of None.
  """
  uses_spreadout = takes_spreadout(name)
  if spreadout is None:
    spreadout = (SpreadoutWeights(item=DEFAULT_ITEM_SPREADOUT_WEIGHT)
                 if uses_spreadout else SpreadoutWeights())
  if not uses_spreadout and spreadout.any:
    raise ValueError(f"--spreadout_weight is for the *_spreadout losses; "
                     f"--loss={name} has none (use {name}_spreadout)"
                     if f"{name}_spreadout" in LOSS_NAMES else
                     f"--spreadout_weight is for the *_spreadout losses, not "
                     f"--loss={name}")
  if spreadout.negative is not None:
    return spreadout
  return dataclasses.replace(
      spreadout, negative=DEFAULT_NEGATIVE_SPREADOUT_WEIGHTS.get(name, 0.0))


def objective(name: str, spreadout: Optional[SpreadoutWeights] = None,
              temperature: float = 0.05, margin: float = DEFAULT_MARGIN,
              hinge_power: int = DEFAULT_HINGE_POWER) -> Objective:
  """The named objective (see `spreadout_for` for the spreadout it gets), its
  loss on the cheapest candidates it can take (`Objective`)."""
  weights = spreadout_for(name, spreadout)
  settings = (base_loss_name(name), temperature, margin, hinge_power, weights)
  loss = make_loss(*settings)
  if not loss.reads_every_item:
    loss = make_loss(*settings, candidates="batch")
  return Objective(name, loss, weights)


@dataclasses.dataclass(frozen=True)
class ObjectiveConfig:
  """The settings of an objective, as training configs and run directories hold them.

  `spreadout` None means the default of `spreadout_for`; `build` checks that
  only `*_spreadout` losses are given spreadout.
  """
  loss: str = "global_softmax"
  spreadout: Optional[SpreadoutWeights] = None
  temperature: float = 0.05
  margin: float = DEFAULT_MARGIN
  hinge_power: int = DEFAULT_HINGE_POWER

  def __post_init__(self):
    base_loss_name(self.loss)

  def build(self) -> Objective:
    return objective(self.loss, self.spreadout, self.temperature, self.margin,
                     self.hinge_power)

  def for_loss(self, loss: str) -> "ObjectiveConfig":
    """The same settings for another loss; spreadout only if it takes any."""
    return dataclasses.replace(
        self, loss=loss, spreadout=self.spreadout if takes_spreadout(loss) else None)
