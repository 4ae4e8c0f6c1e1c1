"""absl flags for the model and its objective, shared by the training scripts."""

from absl import flags

from losses import registry

LOSS = flags.DEFINE_enum("loss", "global_softmax", list(registry.LOSS_NAMES),
                         "Training objective.")
SPREADOUT_WEIGHT = flags.DEFINE_float(
    "spreadout_weight", None,
    f"Weight of the spreadout regularizer for the *_spreadout losses "
    f"(default {registry.DEFAULT_SPREADOUT_WEIGHT}).")
TEMPERATURE = flags.DEFINE_float("temperature", 0.05,
                                 "Softmax temperature of the softmax losses.")
MARGIN = flags.DEFINE_float("margin", 0.9, "Margin of the hinge loss (on cosine).")
BATCH_SIZE = flags.DEFINE_integer("batch_size", 16, "Training batch size.")
EMBEDDING_DIM = flags.DEFINE_integer("embedding_dim", 16,
                                     "Item embedding and output dimension.")
SEED = flags.DEFINE_integer("seed", 0, "Seed of initialization and sampling.")
OUTPUT_DIR = flags.DEFINE_string(
    "output_dir", None, "Run directory (re-running the same command resumes).")
KS = flags.DEFINE_list("k", ["1", "5", "10"], "Cut-offs of recall@k.")


def ks_from_flag() -> tuple:
  try:
    ks = tuple(int(k) for k in KS.value)
  except ValueError as e:
    raise ValueError(f"--k: {e}") from e
  if any(k < 1 for k in ks):
    raise ValueError(f"--k values must be >= 1, got {list(ks)}")
  return ks
