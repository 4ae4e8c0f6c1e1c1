"""absl flags for the model and its objective, shared by the training scripts."""

from typing import Optional

from absl import flags

from losses import registry
from losses import spreadout

LOSS = flags.DEFINE_enum("loss", "global_softmax", list(registry.LOSS_NAMES),
                         "Training objective.")
SPREADOUT_WEIGHT = flags.DEFINE_float(
    "spreadout_weight", None,
    "Weight of spreadout on the item table, for the *_spreadout losses "
    f"(default {registry.DEFAULT_ITEM_SPREADOUT_WEIGHT}).")
CONTEXT_SPREADOUT_WEIGHT = flags.DEFINE_float(
    "context_spreadout_weight", 0.0,
    "Weight of spreadout on the batch's context embeddings (*_spreadout losses).")
CROSS_SPREADOUT_WEIGHT = flags.DEFINE_float(
    "cross_spreadout_weight", 0.0,
    "Weight of spreadout on the batch's off-diagonal context-item scores "
    "(*_spreadout losses).")
NEGATIVE_SPREADOUT_WEIGHT = flags.DEFINE_float(
    "negative_spreadout_weight", None,
    "Weight of spreadout on each context's scores above --negative_margin "
    "against every item but its positive (*_spreadout losses; default "
    + ", ".join(f"{name} {weight}" for name, weight in
                registry.DEFAULT_NEGATIVE_SPREADOUT_WEIGHTS.items()) + ", else 0).")
NEGATIVE_MARGIN = flags.DEFINE_float(
    "negative_margin", spreadout.DEFAULT_NEGATIVE_MARGIN,
    "Cosine above which the negative spreadout pushes an item from a context.")
SPREADOUT_FORM = flags.DEFINE_enum(
    "spreadout_form", "frobenius", list(spreadout.SPREADOUT_FORMS),
    "frobenius: sqrt(sum_{i!=j} s_ij^2), the paper's code; mean: the mean of "
    "s_ij^2 over pairs (a ~1/n weaker push per row).")
HINGE_POWER = flags.DEFINE_integer(
    "hinge_power", registry.DEFAULT_HINGE_POWER,
    "1: max(0, margin - s); 2: its square (the paper's code).")
TEMPERATURE = flags.DEFINE_float("temperature", 0.05,
                                 "Softmax temperature of the softmax losses.")
MARGIN = flags.DEFINE_float(
    "margin", None, "Margin of the hinge loss (on cosine; default: MovieLens "
    f"{registry.DEFAULT_MARGIN}, FedAwS 0.9).")
BATCH_SIZE = flags.DEFINE_integer("batch_size", 16, "Training batch size.")
EMBEDDING_DIM = flags.DEFINE_integer("embedding_dim", 16,
                                     "Item embedding and output dimension.")
SEED = flags.DEFINE_integer("seed", 0, "Seed of initialization and sampling.")
OUTPUT_DIR = flags.DEFINE_string(
    "output_dir", None, "Run directory (re-running the same command resumes).")
KS = flags.DEFINE_list("k", ["1", "5", "10"], "Cut-offs of recall@k.")


def spreadout_from_flags() -> Optional[spreadout.SpreadoutWeights]:
  """The spreadout the flags ask for; None when they leave the default."""
  if (SPREADOUT_WEIGHT.value is None and not CONTEXT_SPREADOUT_WEIGHT.value and
      not CROSS_SPREADOUT_WEIGHT.value and NEGATIVE_SPREADOUT_WEIGHT.value is None and
      NEGATIVE_MARGIN.value == spreadout.DEFAULT_NEGATIVE_MARGIN and
      SPREADOUT_FORM.value == "frobenius"):
    return None
  item = SPREADOUT_WEIGHT.value
  return spreadout.SpreadoutWeights(
      item=registry.DEFAULT_ITEM_SPREADOUT_WEIGHT if item is None else item,
      context=CONTEXT_SPREADOUT_WEIGHT.value, cross=CROSS_SPREADOUT_WEIGHT.value,
      negative=NEGATIVE_SPREADOUT_WEIGHT.value, negative_margin=NEGATIVE_MARGIN.value,
      form=SPREADOUT_FORM.value)


def objective_config_from_flags(loss: str) -> registry.ObjectiveConfig:
  return registry.ObjectiveConfig(
      loss=loss, spreadout=spreadout_from_flags(), temperature=TEMPERATURE.value,
      margin=registry.DEFAULT_MARGIN if MARGIN.value is None else MARGIN.value,
      hinge_power=HINGE_POWER.value)


def ks_from_flag() -> tuple:
  try:
    ks = tuple(int(k) for k in KS.value)
  except ValueError as e:
    raise ValueError(f"--k: {e}") from e
  if any(k < 1 for k in ks):
    raise ValueError(f"--k values must be >= 1, got {list(ks)}")
  return ks


# What --help lists (`scripts.cli.run(help_groups=...)`): the dual encoder's
# flags (--task=movielens) and those every task reads.
MODEL_FLAGS = ("Dual encoder and loss", "movielens", (
    LOSS, SPREADOUT_WEIGHT, CONTEXT_SPREADOUT_WEIGHT, CROSS_SPREADOUT_WEIGHT,
    NEGATIVE_SPREADOUT_WEIGHT, NEGATIVE_MARGIN, SPREADOUT_FORM, HINGE_POWER, TEMPERATURE,
    MARGIN, EMBEDDING_DIM))
RUN_FLAGS = ("Run", None, (BATCH_SIZE, SEED, KS, OUTPUT_DIR))
