"""absl flags every training script reads: the output, the batch, the seed."""

from absl import flags

OUTPUT_DIR = flags.DEFINE_string(
    "output_dir", None, "Run directory (re-running the same command resumes).")
BATCH_SIZE = flags.DEFINE_integer(
    "batch_size", None, "Training batch size (default: the family's; MovieLens and "
    "XC clients and PU 16, XC references 64).")
SEED = flags.DEFINE_integer("seed", 0, "Seed of initialization and sampling.")
RUN_FLAGS = ("Run", None, (OUTPUT_DIR, BATCH_SIZE, SEED))
