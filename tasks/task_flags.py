"""absl flags of the tasks: `--task`, MovieLens (ratings log) and XC flags."""

from absl import flags

from tasks.movielens import movielens_task
from tasks.movielens import synthetic_movielens
from tasks.pu import image_io
from tasks.pu import pu_partitions
from tasks.pu import pu_task
from tasks.xc import partitions
from tasks.xc import synthetic_xc
from tasks.xc import xc_task

TASKS = ("movielens", "xc", "pu")
TASK = flags.DEFINE_enum(
    "task", "movielens", list(TASKS),
    "movielens: next-movie retrieval, clients = users; xc: extreme classification, "
    "clients = label partitions (FedAwS); pu: image classification from clients "
    "with positive and unlabeled data (FedPU).")
_XC_TRAIN_PATH = flags.DEFINE_string(
    "xc_train_path", None, "XC: training file in the Extreme Classification "
    "Repository format ('num_points num_features num_labels', then "
    "'l1,l2 f:v ...').")
_XC_TEST_PATH = flags.DEFINE_string("xc_test_path", None, "XC: the test file.")
_SYNTHETIC_XC = flags.DEFINE_enum(
    "synthetic_xc", None, list(synthetic_xc.PRESETS),
    "XC: the embedded synthetic data instead of --xc_train_path/--xc_test_path.")
_PARTITION = flags.DEFINE_enum(
    "partition", "one_label_per_client", list(partitions.PARTITIONS),
    "XC clients: one label each (FedAwS), --labels_per_client labels each, or "
    "Dirichlet(--dirichlet_alpha) label skew over --num_clients.")
_LABELS_PER_CLIENT = flags.DEFINE_integer(
    "labels_per_client", 5, "XC --partition=k_labels_per_client: labels per client.")
_NUM_CLIENTS = flags.DEFINE_integer(
    "num_clients", None, "XC --partition=dirichlet: number of clients.")
_DIRICHLET_ALPHA = flags.DEFINE_float(
    "dirichlet_alpha", 0.1, "XC --partition=dirichlet: concentration (small: skewed).")
_XC_LABEL_ASSIGNMENT = flags.DEFINE_enum(
    "xc_label_assignment", xc_task.XCTaskConfig.label_assignment,
    list(xc_task.LABEL_ASSIGNMENTS),
    "XC training examples: sample (one label a point, drawn: the FedAwS paper) or "
    "all (a point goes to the client of every label it carries).")
_XC_MAX_FEATURES = flags.DEFINE_integer(
    "xc_max_features", None, "XC: a point keeps its largest feature values, this "
    "many (default: as many as the point with the most has; nothing is cut).")
_XC_FEATURE_SCALING = flags.DEFINE_enum(
    "xc_feature_scaling", xc_task.XCTaskConfig.feature_scaling,
    list(xc_task.FEATURE_SCALINGS),
    "XC: auto (log(1 + count) where the files hold raw counts; tf-idf and binary "
    "values kept) or none.")
_XC_VALIDATION_FRACTION = flags.DEFINE_float(
    "xc_validation_fraction", 0.2,
    "XC: fraction of the test points used for validation (early stopping); with "
    "--xc_class_split=disjoint, of the held-out classes.")
_XC_CLASS_SPLIT = flags.DEFINE_enum(
    "xc_class_split", "points", list(xc_task.CLASS_SPLITS),
    "XC: points (test points of every class; P@k) or disjoint (validation and test "
    "classes held out of training, SOP-style; MAP@R of instance embeddings).")
_XC_HELD_OUT_CLASS_FRACTION = flags.DEFINE_float(
    "xc_held_out_class_fraction", 0.5,
    "XC --xc_class_split=disjoint: fraction of the classes held out of training.")

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
      seed=_DATA_SEED.value,
      cache_dir=_CACHE_DIR.value)


def xc_task_config_from_flags() -> xc_task.XCTaskConfig:
  """The XC task the flags describe (validated)."""
  return xc_task.XCTaskConfig(
      train_path=_XC_TRAIN_PATH.value, test_path=_XC_TEST_PATH.value,
      synthetic=_SYNTHETIC_XC.value, partition=_PARTITION.value,
      labels_per_client=_LABELS_PER_CLIENT.value, num_clients=_NUM_CLIENTS.value,
      dirichlet_alpha=_DIRICHLET_ALPHA.value,
      label_assignment=_XC_LABEL_ASSIGNMENT.value,
      max_features=_XC_MAX_FEATURES.value,
      feature_scaling=_XC_FEATURE_SCALING.value,
      validation_fraction=_XC_VALIDATION_FRACTION.value,
      class_split=_XC_CLASS_SPLIT.value,
      held_out_class_fraction=_XC_HELD_OUT_CLASS_FRACTION.value, seed=_DATA_SEED.value)


_PU_DATA = flags.DEFINE_enum(
    "pu_data", "digits", list(image_io.SOURCES),
    "PU: digits (scikit-learn's bundled 8x8 digits), mnist / fashion_mnist (IDX "
    "files in --mnist_path) or cifar10 (python batches in --cifar_path).")
_MNIST_PATH = flags.DEFINE_string(
    "mnist_path", None, "PU: directory of the MNIST / Fashion-MNIST IDX files "
    "(plain or .gz; the 10k test files alone are split into train/test).")
_CIFAR_PATH = flags.DEFINE_string(
    "cifar_path", None, "PU: directory of CIFAR-10's python batches "
    "(data_batch_1..5, test_batch).")
_PU_SETTINGS = flags.DEFINE_list(
    "pu_settings", list(pu_task.DEFAULT_SETTINGS),
    f"PU: the paper's settings to run (any of {', '.join(pu_task.SETTINGS)}); "
    "replaced by one 'custom' setting when --positive_classes or "
    "--positive_classes_per_client is given.")
_POSITIVE_CLASSES_PER_CLIENT = flags.DEFINE_integer(
    "positive_classes_per_client", None,
    "PU custom setting, balanced: classes each of --pu_num_clients clients labels.")
_PU_NUM_CLIENTS = flags.DEFINE_integer(
    "pu_num_clients", None, "PU custom setting, balanced: number of clients.")
_POSITIVE_CLASSES = flags.DEFINE_list(
    "positive_classes", None,
    "PU custom setting, imbalanced: classes each client labels, e.g. 2,3,4,6,7,8.")
_PU_OVERLAP = flags.DEFINE_bool(
    "pu_overlap", False, "PU custom setting: positive classes shared by clients.")
_PU_DIVISION = flags.DEFINE_enum(
    "pu_division", "iid", list(pu_partitions.DIVISIONS),
    "PU custom setting: iid parts, or class shards (non-iid).")
_PU_SHARDS_PER_CLIENT = flags.DEFINE_integer(
    "pu_shards_per_client", 5,
    "PU custom --pu_division=shards: shards (of distinct classes) per client; there "
    "are 10 times as many shards (the paper's 5-class and 2-class non-iid).")
_LABELED_FRACTION = flags.DEFINE_float(
    "labeled_fraction", 0.5, "PU: fraction of each positive class's points labeled.")
_CLASS_PRIORS = flags.DEFINE_enum(
    "class_priors", "true", list(pu_task.PRIORS),
    "PU: class mix of each client's unlabeled data: true (counted), estimated "
    "(from labeled counts and --labeled_fraction) or uniform.")


def pu_settings_from_flags() -> dict:
  """Setting name -> PUSetting: the named --pu_settings, or the custom one."""
  if _POSITIVE_CLASSES.value or _POSITIVE_CLASSES_PER_CLIENT.value:
    if _POSITIVE_CLASSES.value:
      try:
        counts = tuple(int(v) for v in _POSITIVE_CLASSES.value)
      except ValueError as e:
        raise ValueError(f"--positive_classes: {e}") from e
    else:
      if not _PU_NUM_CLIENTS.value:
        raise ValueError("--positive_classes_per_client needs --pu_num_clients")
      counts = (_POSITIVE_CLASSES_PER_CLIENT.value,) * _PU_NUM_CLIENTS.value
    per_client = _PU_SHARDS_PER_CLIENT.value
    return {"custom": pu_task.PUSetting(_PU_DIVISION.value, counts, _PU_OVERLAP.value,
                                        per_client, 10 * per_client)}
  unknown = [name for name in _PU_SETTINGS.value if name not in pu_task.SETTINGS]
  if unknown or not _PU_SETTINGS.value:
    raise ValueError(f"--pu_settings: unknown {unknown}; choose from "
                     f"{', '.join(pu_task.SETTINGS)}")
  return {name: pu_task.SETTINGS[name] for name in _PU_SETTINGS.value}


def pu_task_config_from_flags() -> pu_task.PUTaskConfig:
  """The PU task the flags describe, with the first setting (validated)."""
  path = _CIFAR_PATH.value if _PU_DATA.value == "cifar10" else _MNIST_PATH.value
  return pu_task.PUTaskConfig(
      data=_PU_DATA.value, data_path=path,
      setting=next(iter(pu_settings_from_flags().values())),
      labeled_fraction=_LABELED_FRACTION.value, priors=_CLASS_PRIORS.value,
      seed=_DATA_SEED.value)


# What --help lists for each task family (`scripts.cli.run(help_groups=...)`):
# (title, the --task it serves or None for all, flags).
TASK_FLAGS = ("Task", None, (TASK,))
MOVIELENS_FLAGS = ("MovieLens data", "movielens", (
    _RATINGS_PATH, _SYNTHETIC, _MAX_CONTEXT_LENGTH, _MIN_TIMELINE_LENGTH,
    _MAX_EXAMPLES_PER_USER, _USER_SPLIT, _EXAMPLE_SPLIT, _SHUFFLE_ACROSS_USERS,
    _DATA_SEED, _CACHE_DIR))
XC_FLAGS = ("XC data", "xc", (
    _DATA_SEED, _XC_TRAIN_PATH, _XC_TEST_PATH, _SYNTHETIC_XC, _PARTITION, _LABELS_PER_CLIENT,
    _NUM_CLIENTS, _DIRICHLET_ALPHA, _XC_LABEL_ASSIGNMENT, _XC_MAX_FEATURES,
    _XC_FEATURE_SCALING, _XC_VALIDATION_FRACTION, _XC_CLASS_SPLIT,
    _XC_HELD_OUT_CLASS_FRACTION))
PU_FLAGS = ("PU data", "pu", (_DATA_SEED,
    _PU_DATA, _MNIST_PATH, _CIFAR_PATH, _PU_SETTINGS, _POSITIVE_CLASSES_PER_CLIENT,
    _PU_NUM_CLIENTS, _POSITIVE_CLASSES, _PU_OVERLAP, _PU_DIVISION, _PU_SHARDS_PER_CLIENT,
    _LABELED_FRACTION, _CLASS_PRIORS))
ALL_FLAGS = (TASK_FLAGS, MOVIELENS_FLAGS, XC_FLAGS, PU_FLAGS)
