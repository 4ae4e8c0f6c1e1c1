"""absl flags of the scripts that train centralized runs (compare,
train_centralized): `centralized_from_flags` keeps a family's centralized
defaults for every flag not given. The stopping flags (--patience,
--min_improvement_se, --smoothing, --report_model) are the loop's, which each
family applies to its centralized runs."""

import dataclasses

from absl import flags

from fed_retrieval.algorithms.optimizers import OPTIMIZER_NAMES
from fed_retrieval.training.centralized_loop import CentralizedConfig
from fed_retrieval.training.run_flags import SEED

CENTRALIZED_OPTIMIZER = flags.DEFINE_enum(
    "centralized_optimizer", None, list(OPTIMIZER_NAMES),
    "Optimizer of the centralized runs (default adam).")
CENTRALIZED_LEARNING_RATE = flags.DEFINE_float(
    "centralized_learning_rate", None,
    "Learning rate of the centralized runs (default: MovieLens 0.01, XC 0.001, PU 0.001).")
CENTRALIZED_MAX_EPOCHS = flags.DEFINE_integer(
    "centralized_max_epochs", None,
    "The centralized runs' cap in passes (default: MovieLens as many examples as "
    "the federated cap trains on; XC 100).")
CENTRALIZED_EVAL_EVERY_STEPS = flags.DEFINE_integer(
    "centralized_eval_every_steps", None,
    "Validation evaluation of the centralized runs every N batches (default: "
    "MovieLens every as many examples as --eval_every federated rounds train on; "
    "otherwise once a pass).")
CENTRALIZED_MIN_PASSES = flags.DEFINE_float(
    "centralized_min_passes", None,
    "The stopping rule ends no centralized run before this many passes (default: "
    "MovieLens as many examples as the federated minimum in passes; XC 5).")
CENTRALIZED_JIT_COMPILE = flags.DEFINE_bool(
    "centralized_jit_compile", None,
    "Compile the centralized runs' training step with XLA (default: MovieLens for "
    "the losses with spreadout and global softmax under SGD; otherwise off).")

CENTRALIZED_FLAGS = ("Centralized runs", None, (
    CENTRALIZED_OPTIMIZER, CENTRALIZED_LEARNING_RATE, CENTRALIZED_MAX_EPOCHS,
    CENTRALIZED_EVAL_EVERY_STEPS, CENTRALIZED_MIN_PASSES, CENTRALIZED_JIT_COMPILE))

_FIELDS = ((CENTRALIZED_OPTIMIZER, "optimizer"), (CENTRALIZED_LEARNING_RATE, "learning_rate"),
           (CENTRALIZED_MAX_EPOCHS, "epochs"),
           (CENTRALIZED_EVAL_EVERY_STEPS, "eval_every_steps"),
           (CENTRALIZED_MIN_PASSES, "min_passes"), (CENTRALIZED_JIT_COMPILE, "jit_compile"),
           (SEED, "seed"))


def centralized_from_flags(defaults: CentralizedConfig) -> CentralizedConfig:
  """A family's centralized runs (`defaults`) with the centralized flags given."""
  return dataclasses.replace(defaults, **{field: holder.value for holder, field in _FIELDS
                                          if flags.FLAGS[holder.name].present})


def with_centralized_flags(settings):
  """A family's settings with the centralized flags given applied to its
  `centralized` config."""
  return dataclasses.replace(settings,
                             centralized=centralized_from_flags(settings.centralized))
