"""An extreme-classification task: label-partitioned clients and evaluation points.

Training is multi-class: each training point keeps one of its labels, drawn
uniformly (seeded), as in the FedAwS paper; points without a label are left
out. Evaluation keeps every true label of a point. The test file is split
(seeded) into validation points (early stopping) and test points (reported).

`class_split="disjoint"` is the retrieval setting of paper 003 (Stanford
Online Products): the points of both files are pooled, a seeded
`held_out_class_fraction` of the classes (by each point's drawn label) is
held out of training, and those classes are split into validation classes
and test classes (`validation_fraction` of them); evaluation points keep that
one label, and the metric is MAP@R among them.
Features become fixed-width rows for the model: the `max_features` largest
values of a point, ids shifted by one so that 0 pads (`PaddedPoints`).
"""

import dataclasses
import hashlib
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import scipy.sparse

from tasks.client_data import ClientDatasets
from tasks.xc import partitions
from tasks.xc import synthetic_xc
from tasks.xc import xc_io


CLASS_SPLITS = ("points", "disjoint")


@dataclasses.dataclass(frozen=True)
class XCTaskConfig:
  train_path: Optional[str] = None
  test_path: Optional[str] = None
  synthetic: Optional[str] = None
  partition: str = "one_label_per_client"
  labels_per_client: int = 5
  num_clients: Optional[int] = None
  dirichlet_alpha: float = 0.1
  max_features: int = 64
  validation_fraction: float = 0.2
  class_split: str = "points"
  held_out_class_fraction: float = 0.5
  seed: int = 0

  def __post_init__(self):
    if (self.synthetic is None) == (self.train_path is None):
      raise ValueError("give either --xc_train_path and --xc_test_path or "
                       "--synthetic_xc")
    if self.train_path is not None and self.test_path is None:
      raise ValueError("--xc_train_path needs --xc_test_path")
    if self.synthetic is not None and self.synthetic not in synthetic_xc.PRESETS:
      raise ValueError(f"--synthetic_xc must be one of "
                       f"{', '.join(synthetic_xc.PRESETS)}, got '{self.synthetic}'")
    if self.partition not in partitions.PARTITIONS:
      raise ValueError(f"--partition must be one of {', '.join(partitions.PARTITIONS)}"
                       f", got '{self.partition}'")
    if self.max_features < 1:
      raise ValueError(f"--xc_max_features must be >= 1, got {self.max_features}")
    if self.class_split not in CLASS_SPLITS:
      raise ValueError(f"--xc_class_split must be one of {', '.join(CLASS_SPLITS)}, "
                       f"got '{self.class_split}'")
    if not 0 < self.held_out_class_fraction < 1:
      raise ValueError("--xc_held_out_class_fraction must be in (0, 1), got "
                       f"{self.held_out_class_fraction}")
    if not 0 < self.validation_fraction < 1:
      raise ValueError("--xc_validation_fraction must be in (0, 1), got "
                       f"{self.validation_fraction}")

  def describe(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass
class PaddedPoints:
  """Points as fixed-width feature rows and, for evaluation, all their labels."""
  feature_ids: np.ndarray  # [N, F] int32, feature id + 1, 0 = padding
  feature_values: np.ndarray  # [N, F] float32
  label_sets: List[np.ndarray]

  def __len__(self) -> int:
    return len(self.feature_ids)

  def subset(self, rows: np.ndarray) -> "PaddedPoints":
    return PaddedPoints(self.feature_ids[rows], self.feature_values[rows],
                        [self.label_sets[r] for r in rows])


def pad_features(features: scipy.sparse.csr_matrix, max_features: int
                 ) -> Tuple[np.ndarray, np.ndarray]:
  """[N, max_features] ids (+1) and values of each row's largest |values|."""
  features = features.tocsr()
  rows = np.repeat(np.arange(features.shape[0]), np.diff(features.indptr))
  order = np.lexsort((-np.abs(features.data), rows))
  position = np.arange(len(order)) - features.indptr[rows[order]]
  keep = order[position < max_features]
  ids = np.zeros((features.shape[0], max_features), np.int32)
  values = np.zeros((features.shape[0], max_features), np.float32)
  slot = position[position < max_features]
  ids[rows[keep], slot] = features.indices[keep] + 1
  values[rows[keep], slot] = features.data[keep]
  return ids, values


@dataclasses.dataclass
class XCTask:
  config: XCTaskConfig
  num_labels: int
  num_features: int
  train_labels: np.ndarray  # The one training label of each training point.
  train: PaddedPoints
  clients: ClientDatasets
  validation: PaddedPoints
  test: PaddedPoints
  dropped_unlabeled: int

  def max_labels_per_client(self) -> int:
    """The most distinct training labels one client holds."""
    return max(len(np.unique(self.train_labels[self.clients.points(c)]))
               for c in self.clients.client_ids)

  def summary(self) -> Dict[str, Any]:
    sizes = np.array([self.clients.num_examples(c) for c in self.clients.client_ids])
    return {"labels": self.num_labels, "features": self.num_features,
            "train_points": len(self.train), "clients": len(sizes),
            "median_points_per_client": float(np.median(sizes)),
            "validation_points": len(self.validation), "test_points": len(self.test),
            "unlabeled_points_left_out": self.dropped_unlabeled}


def _single_labels(label_sets: List[np.ndarray], seed: int) -> np.ndarray:
  rng = np.random.default_rng([seed, 1])
  return np.array([s[rng.integers(len(s))] for s in label_sets], np.int64)


def _labeled(data: xc_io.XCData) -> Tuple[xc_io.XCData, int]:
  keep = np.array([len(s) > 0 for s in data.labels], bool)
  return (xc_io.XCData(data.features[keep], [s for s, k in zip(data.labels, keep) if k],
                       data.num_labels), int((~keep).sum()))


def _padded(data: xc_io.XCData, max_features: int) -> PaddedPoints:
  ids, values = pad_features(data.features, max_features)
  return PaddedPoints(ids, values, data.labels)


def build_xc_task(config: XCTaskConfig) -> XCTask:
  if config.synthetic is not None:
    train_data, test_data = synthetic_xc.generate(synthetic_xc.PRESETS[config.synthetic])
  else:
    train_data, test_data = xc_io.read_train_test(config.train_path, config.test_path)
  train_data, dropped_train = _labeled(train_data)
  test_data, dropped_test = _labeled(test_data)
  if train_data.num_points == 0 or test_data.num_points < 2:
    raise ValueError("the XC task needs labeled training points and >= 2 labeled "
                     "test points")
  if config.class_split == "disjoint":
    return _disjoint_class_task(config, train_data, test_data,
                                dropped_train + dropped_test)
  labels = _single_labels(train_data.labels, config.seed)
  train = _padded(train_data, config.max_features)
  test = _padded(test_data, config.max_features)
  order = np.random.default_rng([config.seed, 2]).permutation(len(test))
  num_val = max(1, int(round(config.validation_fraction * len(test))))
  return XCTask(config, train_data.num_labels, train_data.num_features, labels, train,
                _clients(config, train, labels), test.subset(np.sort(order[:num_val])),
                test.subset(np.sort(order[num_val:])), dropped_train + dropped_test)


def _clients(config: XCTaskConfig, train: PaddedPoints,
             labels: np.ndarray) -> ClientDatasets:
  points = partitions.partition_points(
      labels, config.partition, config.seed, config.labels_per_client,
      config.num_clients, config.dirichlet_alpha)
  return ClientDatasets((train.feature_ids, train.feature_values),
                        labels.astype(np.int32), {str(c): p for c, p in points.items()})


def _disjoint_class_task(config: XCTaskConfig, train_data: xc_io.XCData,
                         test_data: xc_io.XCData, dropped: int) -> "XCTask":
  """Training on some classes, validation and test on other, disjoint ones."""
  features = scipy.sparse.vstack([train_data.features, test_data.features]).tocsr()
  labels = _single_labels(list(train_data.labels) + list(test_data.labels),
                          config.seed)
  classes = np.unique(labels)
  rng = np.random.default_rng([config.seed, 3])
  held_out = rng.permutation(classes)[:int(round(config.held_out_class_fraction *
                                                 len(classes)))]
  num_val = max(1, int(round(config.validation_fraction * len(held_out))))
  if len(held_out) - num_val < 1:
    raise ValueError("--xc_class_split=disjoint: too few classes to hold out "
                     f"validation and test classes ({len(classes)} classes)")
  ids, values = pad_features(features, config.max_features)
  pooled = PaddedPoints(ids, values, [np.array([y]) for y in labels])
  train_rows = np.flatnonzero(~np.isin(labels, held_out))
  train = pooled.subset(train_rows)
  return XCTask(config, train_data.num_labels, train_data.num_features,
                labels[train_rows], train, _clients(config, train, labels[train_rows]),
                pooled.subset(np.flatnonzero(np.isin(labels, held_out[:num_val]))),
                pooled.subset(np.flatnonzero(np.isin(labels, held_out[num_val:]))),
                dropped)


def fingerprint(task: XCTask) -> str:
  """A short hash of the training labels and features (for run configs)."""
  digest = hashlib.sha256(task.train_labels.tobytes())
  digest.update(task.train.feature_ids.tobytes())
  return digest.hexdigest()[:12]
