"""absl flags of the XC family: its data, its model, its comparison."""

import dataclasses

from absl import flags

from fed_retrieval import index_flags
from fed_retrieval.algorithms import fedaws
from fed_retrieval.models import xc_encoder
from fed_retrieval.training import early_stopping
from fed_retrieval.training import federated_flags
from tasks import task_flags
from tasks.xc import partitions
from tasks.xc import synthetic_xc
from tasks.xc import xc_task
from tasks.xc.settings import ARCHITECTURES
from tasks.xc.settings import REFERENCE_DEFAULTS
from tasks.xc.settings import XCSettings

_DEFAULTS = XCSettings(xc_task.XCTaskConfig(synthetic="xc_tiny"))
_TASK_DEFAULTS = _DEFAULTS.task

XC_TRAIN_PATH = flags.DEFINE_string(
    "xc_train_path", None, "XC: training file in the Extreme Classification "
    "Repository format ('num_points num_features num_labels', then "
    "'l1,l2 f:v ...').")
XC_TEST_PATH = flags.DEFINE_string("xc_test_path", None, "XC: the test file.")
SYNTHETIC_XC = flags.DEFINE_enum(
    "synthetic_xc", None, list(synthetic_xc.PRESETS),
    "XC: the embedded synthetic data instead of --xc_train_path/--xc_test_path.")
PARTITION = flags.DEFINE_enum(
    "partition", _TASK_DEFAULTS.partition, list(partitions.PARTITIONS),
    "XC clients: one label each (FedAwS), --labels_per_client labels each (dealt "
    "at random; co_occurring_labels: labels that occur together on points; "
    "confusable_labels: alike but never on one point), or "
    "Dirichlet(--dirichlet_alpha) label skew over --num_clients.")
LABELS_PER_CLIENT = flags.DEFINE_integer(
    "labels_per_client", _TASK_DEFAULTS.labels_per_client,
    "XC --partition=k_labels_per_client, co_occurring_labels, confusable_labels: "
    "labels per client.")
NUM_CLIENTS = flags.DEFINE_integer(
    "num_clients", None, "XC --partition=dirichlet: number of clients.")
DIRICHLET_ALPHA = flags.DEFINE_float(
    "dirichlet_alpha", _TASK_DEFAULTS.dirichlet_alpha,
    "XC --partition=dirichlet: concentration (small: skewed).")
XC_LABEL_ASSIGNMENT = flags.DEFINE_enum(
    "xc_label_assignment", _TASK_DEFAULTS.label_assignment,
    list(xc_task.LABEL_ASSIGNMENTS),
    "XC training examples: sample (one label a point, drawn: the FedAwS paper) or "
    "all (a point goes to the client of every label it carries).")
XC_MAX_FEATURES = flags.DEFINE_integer(
    "xc_max_features", None, "XC: a point keeps its largest feature values, this "
    "many (default: as many as the point with the most has; nothing is cut).")
XC_FEATURE_SCALING = flags.DEFINE_enum(
    "xc_feature_scaling", _TASK_DEFAULTS.feature_scaling, list(xc_task.FEATURE_SCALINGS),
    "XC: auto (log(1 + count) where the files hold raw counts; tf-idf and binary "
    "values kept) or none.")
XC_VALIDATION_FRACTION = flags.DEFINE_float(
    "xc_validation_fraction", _TASK_DEFAULTS.validation_fraction,
    "XC: fraction of the test points used for validation (early stopping); with "
    "--xc_class_split=disjoint, of the held-out classes.")
XC_CLASS_SPLIT = flags.DEFINE_enum(
    "xc_class_split", _TASK_DEFAULTS.class_split, list(xc_task.CLASS_SPLITS),
    "XC: points (test points of every class; P@k) or disjoint (validation and test "
    "classes held out of training, SOP-style; MAP@R of instance embeddings).")
XC_HELD_OUT_CLASS_FRACTION = flags.DEFINE_float(
    "xc_held_out_class_fraction", _TASK_DEFAULTS.held_out_class_fraction,
    "XC --xc_class_split=disjoint: fraction of the classes held out of training.")
XC_ARCHITECTURE = flags.DEFINE_enum(
    "xc_architecture", _DEFAULTS.architecture, list(ARCHITECTURES),
    "XC model: linear (a 256-dim embedding bag, no dense layer), residual (the "
    "bag plus a 512 ReLU layer added back to it), small (64-dim bag, 128 hidden, "
    "64-dim output) or paper (512, 1024-1024, 512).")
XC_BAG = flags.DEFINE_enum(
    "xc_bag", _DEFAULTS.bag, list(fedaws.BAGS),
    "XC, FedAwS/FedSS and their sub-model baselines: a client receives only the "
    "embedding-bag rows of its features (selected) or the whole bag (whole, the "
    "contrast). The oracles always send the whole model.")
XC_SCORING = flags.DEFINE_enum(
    "xc_scoring", _DEFAULTS.scoring, list(xc_encoder.SCORINGS),
    "XC logits: --logit_scale x the cosine of instance and class embeddings (cosine, "
    "the default), or their dot product, neither normalized (dot: paper 003's; "
    "FedSS's family only).")
LOGIT_SCALE = flags.DEFINE_float("logit_scale", _DEFAULTS.logit_scale,
                                 "XC: logits are this times the cosine.")
XC_REFERENCE_ARCHITECTURES = flags.DEFINE_list(
    "xc_reference_architectures", list(_DEFAULTS.reference_architectures),
    "XC comparison: towers besides --xc_architecture that the all-labels reference "
    "is also trained with, each its own row (centralized_all_labels_<tower>): the "
    "ceiling of a stronger centralized model (empty: none).")
CENTRALIZED_REFERENCES = flags.DEFINE_bool(
    "centralized_references", True,
    "XC comparison: also train the centralized references (full softmax on one "
    "label a point and on all labels).")

HELP_GROUPS = (
    ("XC data", "xc", (
        task_flags.DATA_SEED, XC_TRAIN_PATH, XC_TEST_PATH, SYNTHETIC_XC, PARTITION, LABELS_PER_CLIENT,
        NUM_CLIENTS, DIRICHLET_ALPHA, XC_LABEL_ASSIGNMENT, XC_MAX_FEATURES,
        XC_FEATURE_SCALING, XC_VALIDATION_FRACTION, XC_CLASS_SPLIT,
        XC_HELD_OUT_CLASS_FRACTION)),
    ("XC model", "xc", (XC_ARCHITECTURE, XC_BAG, XC_SCORING, LOGIT_SCALE,
                        CENTRALIZED_REFERENCES, XC_REFERENCE_ARCHITECTURES,
                        index_flags.INDEX, index_flags.INDEX_RECALL)),
)


def task_config_from_flags() -> xc_task.XCTaskConfig:
  """The XC data the flags describe (validated)."""
  return xc_task.XCTaskConfig(
      train_path=XC_TRAIN_PATH.value, test_path=XC_TEST_PATH.value,
      synthetic=SYNTHETIC_XC.value, partition=PARTITION.value,
      labels_per_client=LABELS_PER_CLIENT.value, num_clients=NUM_CLIENTS.value,
      dirichlet_alpha=DIRICHLET_ALPHA.value, label_assignment=XC_LABEL_ASSIGNMENT.value,
      max_features=XC_MAX_FEATURES.value, feature_scaling=XC_FEATURE_SCALING.value,
      validation_fraction=XC_VALIDATION_FRACTION.value, class_split=XC_CLASS_SPLIT.value,
      held_out_class_fraction=XC_HELD_OUT_CLASS_FRACTION.value,
      seed=task_flags.DATA_SEED.value)


def settings_from_flags() -> XCSettings:
  """The XC run or comparison the flags describe (validated)."""
  federated_flags.refuse_fedavg_only_flags("the XC algorithms")
  loop = federated_flags.loop_from_flags(_DEFAULTS.loop)
  return XCSettings(
      task=task_config_from_flags(),
      algorithm=federated_flags.ALGORITHM.value or _DEFAULTS.algorithm,
      algorithms=tuple(federated_flags.ALGORITHMS.value or _DEFAULTS.algorithms),
      architecture=XC_ARCHITECTURE.value, scoring=XC_SCORING.value,
      logit_scale=LOGIT_SCALE.value, bag=XC_BAG.value,
      fedaws=federated_flags.fedaws_from_flags(), fedss=federated_flags.fedss_from_flags(),
      dp=federated_flags.dp_from_flags(), loop=loop,
      centralized=dataclasses.replace(
          REFERENCE_DEFAULTS, seed=loop.seed, **early_stopping.stopping_fields(loop)),
      references=CENTRALIZED_REFERENCES.value,
      reference_architectures=tuple(XC_REFERENCE_ARCHITECTURES.value),
      index=index_flags.INDEX.value, index_recall=index_flags.INDEX_RECALL.value)
