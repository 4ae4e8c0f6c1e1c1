"""absl flags of the MovieLens family: its data, the dual encoder and its
loss, its comparison's controls."""

import dataclasses
from typing import Optional

from absl import flags

from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import fedss
from fed_retrieval.training import early_stopping
from fed_retrieval.training import federated_flags
from losses import registry
from losses import spreadout
from tasks import task_flags
from tasks.movielens import interaction_log
from tasks.movielens import movielens_task
from tasks.movielens import synthetic_movielens
from fed_retrieval.training.loop_config import LOOP_DEFAULTS
from tasks.movielens.settings import MovieLensSettings
from tasks.movielens import settings as ml_settings

RATINGS_PATH = flags.DEFINE_string(
    "ratings_path", None,
    "A MovieLens release, as GroupLens ships it: its directory or its ratings file "
    "(ML-100K u.data, ML-1M/10M ratings.dat, ML-20M/25M/32M and ml-latest "
    "ratings.csv).")
INTERACTIONS_PATH = flags.DEFINE_string(
    "interactions_path", None,
    "An interaction log of one's own: CSV, TSV or Parquet, an event a row, its "
    "columns named by --user_column, --item_column, --time_column (and "
    "--rating_column); ids of any kind.")
USER_COLUMN = flags.DEFINE_string("user_column", "user_id",
                                  "--interactions_path: the user id's column.")
ITEM_COLUMN = flags.DEFINE_string("item_column", "item_id",
                                  "--interactions_path: the item id's column.")
TIME_COLUMN = flags.DEFINE_string(
    "time_column", "timestamp",
    "--interactions_path: the event time's column (numbers or date-times).")
RATING_COLUMN = flags.DEFINE_string(
    "rating_column", None, "--interactions_path: the rating's column, if any.")
SYNTHETIC = flags.DEFINE_enum(
    "synthetic", None, list(synthetic_movielens.PRESETS),
    "Use the embedded synthetic MovieLens-shaped data instead of --ratings_path.")
MAX_CONTEXT_LENGTH = flags.DEFINE_integer(
    "max_context_length", 10, "Previous items in a context, most recent first.")
MIN_TIMELINE_LENGTH = flags.DEFINE_integer(
    "min_timeline_length", 3, "Users with fewer ratings are dropped.")
MAX_EXAMPLES_PER_USER = flags.DEFINE_integer(
    "max_examples_per_user", None, "Keep only each user's most recent examples.")
USER_SPLIT = flags.DEFINE_list(
    "user_split", ["0.8", "0.1", "0.1"],
    "Train,val,test fractions of users (the federated split).")
EXAMPLE_SPLIT = flags.DEFINE_list(
    "example_split", ["0.9", "0.1"],
    "Train,test fractions of examples (the centralized split).")
SHUFFLE_ACROSS_USERS = flags.DEFINE_bool(
    "shuffle_across_users", False,
    "Deal training examples to users at random (IID control, counts kept).")
CACHE_DIR = flags.DEFINE_string(
    "cache_dir", movielens_task.DEFAULT_CACHE_DIR,
    "Where the synthetic ratings.dat files are generated once.")
MIN_RATING = flags.DEFINE_float(
    "min_rating", None,
    "Keep only the events rated at least this (the positives); needs ratings.")


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
    "margin", registry.DEFAULT_MARGIN, "Margin of the hinge loss (on cosine).")
EMBEDDING_DIM = flags.DEFINE_integer("embedding_dim", 16,
                                     "Item embedding and output dimension.")
KS = flags.DEFINE_list("k", ["1", "5", "10"], "Cut-offs of recall@k.")
SPLIT_BY = flags.DEFINE_enum(
    "split_by", "example", list(ml_settings.SPLITS),
    "A centralized run's data: 'example', the centralized 90/10 split of "
    "examples; 'user', the federated training users, validated and tested on "
    "the federated runs' users.")
LOSSES = flags.DEFINE_list("losses", list(ml_settings.LOSSES),
                           "A comparison's losses.")
INCLUDE_SHUFFLED = flags.DEFINE_bool(
    "include_shuffled", False, "Also train the IID 'federated shuffled' control.")
INCLUDE_FEDSGD = flags.DEFINE_bool(
    "include_fedsgd", False, "Also train the FedSGD control (one step per round).")
NOISE_MULTIPLIERS = flags.DEFINE_list(
    "noise_multipliers", [],
    "A client-level DP run of each loss per noise multiplier, beside the others "
    "(--clip_norm, --dp_clipping, --target_delta apply), with epsilon.")

DATA_FLAGS = ("Interactions (MovieLens or one's own)", "movielens", (
    RATINGS_PATH, INTERACTIONS_PATH, USER_COLUMN, ITEM_COLUMN, TIME_COLUMN,
    RATING_COLUMN, MIN_RATING, SYNTHETIC, MAX_CONTEXT_LENGTH, MIN_TIMELINE_LENGTH,
    MAX_EXAMPLES_PER_USER, USER_SPLIT, EXAMPLE_SPLIT, SHUFFLE_ACROSS_USERS,
    task_flags.DATA_SEED, CACHE_DIR))
HELP_GROUPS = (
    DATA_FLAGS,
    ("Dual encoder and loss", "movielens", (
        LOSS, SPREADOUT_WEIGHT, CONTEXT_SPREADOUT_WEIGHT, CROSS_SPREADOUT_WEIGHT,
        NEGATIVE_SPREADOUT_WEIGHT, NEGATIVE_MARGIN, SPREADOUT_FORM, HINGE_POWER,
        TEMPERATURE, MARGIN, EMBEDDING_DIM, KS, SPLIT_BY)),
    ("MovieLens comparison", "movielens", (
        LOSSES, INCLUDE_SHUFFLED, INCLUDE_FEDSGD, NOISE_MULTIPLIERS)),
)


def _fractions(flag_name: str, values) -> tuple:
  try:
    return tuple(float(v) for v in values)
  except ValueError as e:
    raise ValueError(f"--{flag_name}: {e}") from e


def task_config_from_flags() -> movielens_task.TaskConfig:
  """The ratings and splits the flags describe (validated)."""
  given = lambda holder: flags.FLAGS[holder.name].present
  log_flags = (USER_COLUMN, ITEM_COLUMN, TIME_COLUMN, RATING_COLUMN)
  if INTERACTIONS_PATH.value is None and any(given(h) for h in log_flags):
    raise ValueError(f"--{next(h for h in log_flags if given(h)).name} names a column "
                     "of --interactions_path")
  return movielens_task.TaskConfig(
      ratings_path=RATINGS_PATH.value, synthetic=SYNTHETIC.value,
      interactions_path=INTERACTIONS_PATH.value,
      log_columns=interaction_log.LogColumns(USER_COLUMN.value, ITEM_COLUMN.value,
                                             TIME_COLUMN.value, RATING_COLUMN.value),
      min_rating=MIN_RATING.value,
      max_context_length=MAX_CONTEXT_LENGTH.value,
      min_timeline_length=MIN_TIMELINE_LENGTH.value,
      max_examples_per_user=MAX_EXAMPLES_PER_USER.value,
      user_split=_fractions("user_split", USER_SPLIT.value),
      example_split=_fractions("example_split", EXAMPLE_SPLIT.value),
      shuffle_across_users=SHUFFLE_ACROSS_USERS.value, seed=task_flags.DATA_SEED.value,
      cache_dir=CACHE_DIR.value)


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
      margin=MARGIN.value, hinge_power=HINGE_POWER.value)


def ks_from_flag() -> tuple:
  try:
    ks = tuple(int(k) for k in KS.value)
  except ValueError as e:
    raise ValueError(f"--k: {e}") from e
  if any(k < 1 for k in ks):
    raise ValueError(f"--k values must be >= 1, got {list(ks)}")
  return ks


def settings_from_flags() -> MovieLensSettings:
  """The MovieLens run or comparison the flags describe (validated)."""
  algorithm = federated_flags.ALGORITHM.value or "fedavg"
  if algorithm in fedss.ALGORITHMS or federated_flags.ALGORITHMS.value:
    if flags.FLAGS[LOSS.name].present and LOSS.value != "global_softmax":
      raise ValueError(f"--algorithm={algorithm} trains global_softmax (sampled over "
                       f"a client's items), not --loss={LOSS.value}")
  if algorithm in fedss.ALGORITHMS:
    federated_flags.refuse_fedavg_only_flags("FedSS and its baselines")
  loop = federated_flags.loop_from_flags(LOOP_DEFAULTS["movielens"])
  centralized = dataclasses.replace(ml_settings.CENTRALIZED_DEFAULTS,
                                    batch_size=loop.batch_size, seed=loop.seed)
  centralized = dataclasses.replace(centralized, **{
      field: getattr(loop, field) for field in early_stopping.STOPPING_FIELDS
      if flags.FLAGS[field].present})
  fedavg_config = federated_flags.fedavg_from_flags(ml_settings.FEDAVG_DEFAULTS)
  if algorithm in fedavg.ALGORITHMS:
    fedavg_config = dataclasses.replace(fedavg_config, algorithm=algorithm)
  return MovieLensSettings(
      task=task_config_from_flags(), objective=objective_config_from_flags(LOSS.value),
      losses=tuple(LOSSES.value), embedding_dim=EMBEDDING_DIM.value, ks=ks_from_flag(),
      fedavg=fedavg_config, hinge_max_local_steps=(
          None if flags.FLAGS[federated_flags.MAX_LOCAL_STEPS.name].present
          else ml_settings.HINGE_MAX_LOCAL_STEPS),
      algorithm=algorithm, fedss=federated_flags.fedss_from_flags(ml_settings.FEDSS_DEFAULTS),
      algorithms=tuple(federated_flags.ALGORITHMS.value or ()),
      include_shuffled=INCLUDE_SHUFFLED.value, include_fedsgd=INCLUDE_FEDSGD.value,
      dp_runs=tuple(federated_flags.dp_configs_from_flags(NOISE_MULTIPLIERS.value)),
      split=SPLIT_BY.value,
      loop=loop, centralized=centralized)

