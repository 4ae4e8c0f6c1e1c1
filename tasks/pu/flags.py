"""absl flags of the PU family: its data and settings, the risk and the CNN."""

import dataclasses

from absl import flags

from fed_retrieval.algorithms import fedavg
from fed_retrieval.training import federated_flags
from fed_retrieval.training import run_flags
from losses import pu_risk
from tasks import task_flags
from tasks.pu import image_io
from tasks.pu import pu_partitions
from tasks.pu import pu_task
from tasks.pu import settings as pu_settings
from tasks.pu.settings import PUSettings

_DEFAULTS = PUSettings(pu_task.PUTaskConfig())

PU_DATA = flags.DEFINE_enum(
    "pu_data", "digits", list(image_io.SOURCES),
    "PU: digits (scikit-learn's bundled 8x8 digits), mnist / fashion_mnist (IDX "
    "files in --mnist_path) or cifar10 (python batches in --cifar_path).")
MNIST_PATH = flags.DEFINE_string(
    "mnist_path", None, "PU: directory of the MNIST / Fashion-MNIST IDX files "
    "(plain or .gz; the 10k test files alone are split into train/test).")
CIFAR_PATH = flags.DEFINE_string(
    "cifar_path", None, "PU: directory of CIFAR-10's python batches "
    "(data_batch_1..5, test_batch).")
PU_SETTINGS = flags.DEFINE_list(
    "pu_settings", list(pu_task.DEFAULT_SETTINGS),
    f"PU: the paper's settings to run (any of {', '.join(pu_task.SETTINGS)}); "
    "replaced by one 'custom' setting when --positive_classes or "
    "--positive_classes_per_client is given.")
POSITIVE_CLASSES_PER_CLIENT = flags.DEFINE_integer(
    "positive_classes_per_client", None,
    "PU custom setting, balanced: classes each of --pu_num_clients clients labels.")
PU_NUM_CLIENTS = flags.DEFINE_integer(
    "pu_num_clients", None, "PU custom setting, balanced: number of clients.")
POSITIVE_CLASSES = flags.DEFINE_list(
    "positive_classes", None,
    "PU custom setting, imbalanced: classes each client labels, e.g. 2,3,4,6,7,8.")
PU_OVERLAP = flags.DEFINE_bool(
    "pu_overlap", False, "PU custom setting: positive classes shared by clients.")
PU_DIVISION = flags.DEFINE_enum(
    "pu_division", "iid", list(pu_partitions.DIVISIONS),
    "PU custom setting: iid parts, or class shards (non-iid).")
PU_SHARDS_PER_CLIENT = flags.DEFINE_integer(
    "pu_shards_per_client", 5,
    "PU custom --pu_division=shards: shards (of distinct classes) per client; there "
    "are 10 times as many shards (the paper's 5-class and 2-class non-iid).")
LABELED_FRACTION = flags.DEFINE_float(
    "labeled_fraction", 0.5, "PU: fraction of each positive class's points labeled.")
CLASS_PRIORS = flags.DEFINE_enum(
    "class_priors", "true", list(pu_task.PRIORS),
    "PU: class mix of each client's unlabeled data: true (counted), estimated "
    "(from labeled counts and --labeled_fraction) or uniform.")
PU_METHOD = flags.DEFINE_enum("pu_method", _DEFAULTS.method, list(pu_risk.METHODS),
                              "PU: the method of one run.")
METHODS = flags.DEFINE_list("methods", list(pu_risk.METHODS),
                            "PU comparison: the methods to compare.")
PU_SURROGATE = flags.DEFINE_enum(
    "pu_surrogate", _DEFAULTS.surrogate, list(pu_risk.SURROGATES),
    "PU: surrogate of the negative classes' risk estimate: probability (1 - p, "
    "bounded) or cross_entropy (-log p).")
NON_NEGATIVE = flags.DEFINE_bool(
    "non_negative", _DEFAULTS.non_negative,
    "PU: non-negative correction of the negative classes' risk estimate (nnPU).")
CONV_FILTERS = flags.DEFINE_list(
    "conv_filters", [str(f) for f in _DEFAULTS.conv_filters],
    "PU image classifier: filters of each 3x3 convolution.")
DENSE_UNITS = flags.DEFINE_integer("dense_units", _DEFAULTS.dense_units,
                                   "PU image classifier: units of the dense layer.")

HELP_GROUPS = (
    ("PU data", "pu", (
        task_flags.DATA_SEED, PU_DATA, MNIST_PATH, CIFAR_PATH, PU_SETTINGS,
        POSITIVE_CLASSES_PER_CLIENT, PU_NUM_CLIENTS, POSITIVE_CLASSES, PU_OVERLAP,
        PU_DIVISION, PU_SHARDS_PER_CLIENT, LABELED_FRACTION, CLASS_PRIORS)),
    ("FedPU and the image model", "pu", (
        PU_METHOD, METHODS, PU_SURROGATE, NON_NEGATIVE, CONV_FILTERS, DENSE_UNITS)),
)


def _ints(holder) -> tuple:
  try:
    return tuple(int(v) for v in holder.value)
  except ValueError as e:
    raise ValueError(f"--{holder.name}: {e}") from e


def pu_settings_from_flags() -> tuple:
  """(name, PUSetting) pairs: the named --pu_settings, or the custom one."""
  if POSITIVE_CLASSES.value or POSITIVE_CLASSES_PER_CLIENT.value:
    if POSITIVE_CLASSES.value:
      counts = _ints(POSITIVE_CLASSES)
    else:
      if not PU_NUM_CLIENTS.value:
        raise ValueError("--positive_classes_per_client needs --pu_num_clients")
      counts = (POSITIVE_CLASSES_PER_CLIENT.value,) * PU_NUM_CLIENTS.value
    per_client = PU_SHARDS_PER_CLIENT.value
    return (("custom", pu_task.PUSetting(PU_DIVISION.value, counts, PU_OVERLAP.value,
                                         per_client, 10 * per_client)),)
  unknown = [name for name in PU_SETTINGS.value if name not in pu_task.SETTINGS]
  if unknown or not PU_SETTINGS.value:
    raise ValueError(f"--pu_settings: unknown {unknown}; choose from "
                     f"{', '.join(pu_task.SETTINGS)}")
  return tuple((name, pu_task.SETTINGS[name]) for name in PU_SETTINGS.value)


def settings_from_flags() -> PUSettings:
  """The PU run or comparison the flags describe (validated); loop flags not
  given keep the PU defaults, and giving --batch_size or --local_epochs turns
  off the sizing of local work to the data."""
  named = pu_settings_from_flags()
  path = CIFAR_PATH.value if PU_DATA.value == "cifar10" else MNIST_PATH.value
  fedavg_config = federated_flags.fedavg_from_flags(pu_settings.FEDAVG_DEFAULTS)
  if federated_flags.ALGORITHM.value in fedavg.ALGORITHMS:  # Appendix B: FedSGD.
    fedavg_config = dataclasses.replace(fedavg_config,
                                        algorithm=federated_flags.ALGORITHM.value)
  local_work_given = any(flags.FLAGS[h.name].present
                         for h in (run_flags.BATCH_SIZE, federated_flags.LOCAL_EPOCHS))
  return PUSettings(
      task=pu_task.PUTaskConfig(
          data=PU_DATA.value, data_path=path, setting=named[0][1],
          labeled_fraction=LABELED_FRACTION.value, priors=CLASS_PRIORS.value,
          seed=task_flags.DATA_SEED.value),
      settings=named, method=PU_METHOD.value, methods=tuple(METHODS.value),
      surrogate=PU_SURROGATE.value, non_negative=NON_NEGATIVE.value,
      conv_filters=_ints(CONV_FILTERS), dense_units=DENSE_UNITS.value,
      fedavg=fedavg_config, loop=federated_flags.loop_from_flags(_DEFAULTS.loop),
      size_local_work=not local_work_given,
      centralized=dataclasses.replace(_DEFAULTS.centralized, seed=run_flags.SEED.value))
