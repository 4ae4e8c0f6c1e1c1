"""absl flags shared by every script that reads a ratings log, and their TaskConfig."""

from absl import flags

from tasks.movielens import movielens_task
from tasks.movielens import synthetic_movielens

_RATINGS_PATH = flags.DEFINE_string(
    "ratings_path", None,
    "MovieLens ratings file: ML-1M 'ratings.dat' or ML-20M/25M 'ratings.csv'.")
_SYNTHETIC = flags.DEFINE_enum(
    "synthetic", None, list(synthetic_movielens.PRESETS),
    "Use the embedded synthetic MovieLens-shaped data instead of --ratings_path.")
_MAX_CONTEXT_LENGTH = flags.DEFINE_integer(
    "max_context_length", 10, "Previous items in a context, most recent first.")
_MIN_TIMELINE_LENGTH = flags.DEFINE_integer(
    "min_timeline_length", 3, "Users with fewer ratings are dropped.")
_MAX_EXAMPLES_PER_USER = flags.DEFINE_integer(
    "max_examples_per_user", None, "Keep only each user's most recent examples.")
_USER_SPLIT = flags.DEFINE_list(
    "user_split", ["0.8", "0.1", "0.1"],
    "Train,val,test fractions of users (the federated split).")
_EXAMPLE_SPLIT = flags.DEFINE_list(
    "example_split", ["0.9", "0.1"],
    "Train,test fractions of examples (the centralized split).")
_SHUFFLE_ACROSS_USERS = flags.DEFINE_bool(
    "shuffle_across_users", False,
    "Deal training examples to users at random (IID control, counts kept).")
_VOCABULARY_SIZE = flags.DEFINE_integer(
    "vocabulary_size", None, "Item vocabulary size; default: largest id + 1.")
_DATA_SEED = flags.DEFINE_integer("data_seed", 0, "Seed of the data splits.")
_CACHE_DIR = flags.DEFINE_string(
    "cache_dir", movielens_task.DEFAULT_CACHE_DIR,
    "Where the synthetic ratings.dat files are generated once.")


def _fractions(flag_name: str, values) -> tuple:
  try:
    return tuple(float(v) for v in values)
  except ValueError as e:
    raise ValueError(f"--{flag_name}: {e}") from e


def task_config_from_flags() -> movielens_task.TaskConfig:
  """The TaskConfig described by the flags (validated)."""
  return movielens_task.TaskConfig(
      ratings_path=_RATINGS_PATH.value,
      synthetic=_SYNTHETIC.value,
      max_context_length=_MAX_CONTEXT_LENGTH.value,
      min_timeline_length=_MIN_TIMELINE_LENGTH.value,
      max_examples_per_user=_MAX_EXAMPLES_PER_USER.value,
      user_split=_fractions("user_split", _USER_SPLIT.value),
      example_split=_fractions("example_split", _EXAMPLE_SPLIT.value),
      shuffle_across_users=_SHUFFLE_ACROSS_USERS.value,
      vocabulary_size=_VOCABULARY_SIZE.value,
      seed=_DATA_SEED.value,
      cache_dir=_CACHE_DIR.value)
