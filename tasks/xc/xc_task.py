"""An extreme-classification task: label-partitioned clients and evaluation points.

Training examples are (point, label) pairs, made from the labeled training
points by `label_assignment`:
- `sample`: each point keeps one of its labels, drawn uniformly (seeded), as
  in the FedAwS paper (one example per point);
- `all`: one example per label of the point, so a point goes to every client
  whose label it carries (under one label per client, the client of label c
  holds every point labeled c). Beyond the paper: it keeps the labels
  `sample` throws away (Bibtex has 2.4 a point).
The partition deals the examples to clients by their label. Points without a
label are left out. Evaluation keeps every true label of a point. The test
file is split (seeded) into validation points (early stopping) and test
points (reported).

`class_split="disjoint"` is the retrieval setting of paper 003 (Stanford
Online Products): the points of both files are pooled, a seeded
`held_out_class_fraction` of the classes (by each point's drawn label) is
held out of training, and those classes are split into validation classes
and test classes (`validation_fraction` of them); evaluation points keep that
one label, and the metric is MAP@R among them.
Features become fixed-width rows for the model, ids shifted by one so that 0
pads (`PaddedPoints`). The width is the most features any point of the data
has, so nothing is cut; a smaller `max_features` keeps each point's largest
values, and the summary counts the points that lost some. Files of raw counts
(every value a whole number, some above 1) get the usual sublinear term
frequency, log(1 + count) (`feature_scaling="auto"`); tf-idf or binary values
are kept. The tower then takes the value-weighted mean of the feature
embeddings, which is the L1 normalization of each point.
"""

import dataclasses
import hashlib
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse

from tasks.client_data import ClientDatasets
from tasks.xc import partitions
from tasks.xc import synthetic_xc
from tasks.xc import xc_io


CLASS_SPLITS = ("points", "disjoint")
LABEL_ASSIGNMENTS = ("sample", "all")
FEATURE_SCALINGS = ("auto", "none")


@dataclasses.dataclass(frozen=True)
class XCTaskConfig:
  train_path: Optional[str] = None
  test_path: Optional[str] = None
  synthetic: Optional[str] = None
  partition: str = "one_label_per_client"
  labels_per_client: int = 5
  num_clients: Optional[int] = None
  dirichlet_alpha: float = 0.1
  label_assignment: str = "sample"
  max_features: Optional[int] = None  # None: the most features a point has.
  feature_scaling: str = "auto"
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
    _check_choice("partition", self.partition, partitions.PARTITIONS)
    if self.max_features is not None and self.max_features < 1:
      raise ValueError(f"--xc_max_features must be >= 1, got {self.max_features}")
    _check_choice("xc_label_assignment", self.label_assignment, LABEL_ASSIGNMENTS)
    _check_choice("xc_feature_scaling", self.feature_scaling, FEATURE_SCALINGS)
    _check_choice("xc_class_split", self.class_split, CLASS_SPLITS)
    if not 0 < self.held_out_class_fraction < 1:
      raise ValueError("--xc_held_out_class_fraction must be in (0, 1), got "
                       f"{self.held_out_class_fraction}")
    if not 0 < self.validation_fraction < 1:
      raise ValueError("--xc_validation_fraction must be in (0, 1), got "
                       f"{self.validation_fraction}")
    if self.class_split == "disjoint" and self.label_assignment == "all":
      raise ValueError("--xc_class_split=disjoint evaluates one label a point: use "
                       "--xc_label_assignment=sample")

  def describe(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  def describe_points(self) -> Dict[str, Any]:
    """The settings that make the points and splits, without those that deal
    examples to clients (partition, label assignment): what a centralized
    reference depends on."""
    clients = ("partition", "labels_per_client", "num_clients", "dirichlet_alpha",
               "label_assignment")
    return {k: v for k, v in self.describe().items() if k not in clients}


def _check_choice(flag: str, value: str, choices: Sequence[str]) -> None:
  if value not in choices:
    raise ValueError(f"--{flag} must be one of {', '.join(choices)}, got '{value}'")


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
  """[N, max_features] ids (+1) and values of each row's largest |values|
  (ties: the lower feature id first)."""
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
  train: PaddedPoints  # The labeled training points, all their labels.
  example_points: np.ndarray  # The training point (row of `train`) of each example.
  example_labels: np.ndarray  # The label of each training example.
  clients: ClientDatasets  # Examples dealt to clients by their label.
  validation: PaddedPoints
  test: PaddedPoints
  dropped_unlabeled: int
  points_with_features_cut: int
  feature_scaling: str  # What was applied: "log1p" (raw counts) or "none".

  @property
  def feature_width(self) -> int:
    """Features per padded row: the batch shape the models are built for."""
    return self.train.feature_ids.shape[1]

  def client_label_sets(self) -> List[np.ndarray]:
    """The distinct training labels each client holds, in client order."""
    return [np.unique(self.example_labels[self.clients.points(c)])
            for c in self.clients.client_ids]

  def labels_per_client(self) -> np.ndarray:
    """The number of distinct training labels of each client, in client order."""
    return np.array([len(labels) for labels in self.client_label_sets()])

  def max_labels_per_client(self) -> int:
    """The most distinct training labels one client holds."""
    return int(self.labels_per_client().max())

  def bag_rows_per_client(self) -> np.ndarray:
    """The embedding-bag rows each client's points read (its distinct feature
    ids and the padding row), in client order: what a selected bag sends it."""
    return np.array([
        len(np.union1d(self.train.feature_ids[self.example_points[
            self.clients.points(c)]], [0]))
        for c in self.clients.client_ids])

  def training_examples(self, label_assignment: str) -> Tuple[np.ndarray, np.ndarray]:
    """(point rows, labels) of the training examples under `label_assignment`
    (the clients' own when it is the task's): what the clients of that
    protocol hold."""
    if label_assignment == self.config.label_assignment:
      return self.example_points, self.example_labels
    return _examples(self.train.label_sets, label_assignment, self.config.seed)

  def examples_with_other_held_labels(self) -> int:
    """Client examples whose point carries another label its client holds."""
    labels = self.clients.labels
    return 0 if labels.ndim == 1 else int(np.sum(np.any(labels[:, 1:] >= 0, axis=1)))

  def summary(self) -> Dict[str, Any]:
    sizes = np.array([self.clients.num_examples(c) for c in self.clients.client_ids])
    return {"labels": self.num_labels, "features": self.num_features,
            "train_points": len(self.train), "train_examples": len(self.example_labels),
            "examples_with_other_held_labels": self.examples_with_other_held_labels(),
            "clients": len(sizes), "median_examples_per_client": float(np.median(sizes)),
            "validation_points": len(self.validation), "test_points": len(self.test),
            "unlabeled_points_left_out": self.dropped_unlabeled,
            "feature_width": self.feature_width,
            "points_with_features_cut": self.points_with_features_cut,
            "feature_scaling": self.feature_scaling}


def _examples(label_sets: Sequence[np.ndarray], label_assignment: str,
              seed: int) -> Tuple[np.ndarray, np.ndarray]:
  """(point of each example, its label): one drawn label a point, or all of them."""
  if label_assignment == "sample":
    rng = np.random.default_rng([seed, 1])
    return (np.arange(len(label_sets)),
            np.array([s[rng.integers(len(s))] for s in label_sets], np.int64))
  counts = [len(s) for s in label_sets]
  return (np.repeat(np.arange(len(label_sets)), counts),
          np.concatenate([np.asarray(s, np.int64) for s in label_sets] +
                         [np.zeros(0, np.int64)]))


def _labeled(data: xc_io.XCData) -> Tuple[xc_io.XCData, int]:
  keep = np.array([len(s) > 0 for s in data.labels], bool)
  return (xc_io.XCData(data.features[keep], [s for s, k in zip(data.labels, keep) if k],
                       data.num_labels), int((~keep).sum()))


def _scaled(features: scipy.sparse.csr_matrix, scaling: str
            ) -> Tuple[scipy.sparse.csr_matrix, str]:
  """log(1 + count) when `auto` finds raw counts (whole numbers, some above 1)."""
  values = features.data
  counts = (len(values) and np.all(values == np.round(values)) and values.max() > 1
            and values.min() >= 0)
  if scaling == "none" or not counts:
    return features, "none"
  scaled = features.copy()
  scaled.data = np.log1p(values).astype(np.float32)
  return scaled, "log1p"


def _padded_splits(config: XCTaskConfig, *features: scipy.sparse.csr_matrix
                   ) -> Tuple[List[Tuple[np.ndarray, np.ndarray]], int, str]:
  """Each matrix as padded (ids, values) of one common width; the points cut
  (only when `max_features` is below a point's count); the scaling applied."""
  stacked, scaling = _scaled(scipy.sparse.vstack(features).tocsr(),
                             config.feature_scaling)
  per_point = np.diff(stacked.indptr)
  most = max(int(per_point.max(initial=0)), 1)
  width = most if config.max_features is None else config.max_features
  ids, values = pad_features(stacked, width)
  bounds = np.cumsum([0] + [f.shape[0] for f in features])
  return ([(ids[a:b], values[a:b]) for a, b in zip(bounds[:-1], bounds[1:])],
          int((per_point > width).sum()), scaling)


def build_xc_task(config: XCTaskConfig) -> XCTask:
  """Reads (or generates) the data and builds the clients and evaluation
  points, saying so on stderr with the task's summary."""
  source = config.train_path or f"the synthetic '{config.synthetic}' preset"
  print(f"XC: reading {source}", file=sys.stderr, flush=True)
  task = _build_xc_task(config)
  print("XC task: " + ", ".join(f"{k} {v}" for k, v in task.summary().items()),
        file=sys.stderr, flush=True)
  return task


def _build_xc_task(config: XCTaskConfig) -> XCTask:
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
  (train_rows, test_rows), cut, scaling = _padded_splits(
      config, train_data.features, test_data.features)
  train = PaddedPoints(*train_rows, train_data.labels)
  test = PaddedPoints(*test_rows, test_data.labels)
  example_points, example_labels = _examples(train.label_sets, config.label_assignment,
                                             config.seed)
  order = np.random.default_rng([config.seed, 2]).permutation(len(test))
  num_val = max(1, int(round(config.validation_fraction * len(test))))
  return XCTask(config, train_data.num_labels, train_data.num_features, train,
                example_points, example_labels,
                _clients(config, train, example_points, example_labels),
                test.subset(np.sort(order[:num_val])),
                test.subset(np.sort(order[num_val:])), dropped_train + dropped_test,
                cut, scaling)


def _feature_matrix(points: PaddedPoints) -> scipy.sparse.csr_matrix:
  """[points, features + 1] of padded rows (column 0, padding, stays empty)."""
  rows = np.repeat(np.arange(len(points)), points.feature_ids.shape[1])
  return scipy.sparse.csr_matrix(
      (points.feature_values.ravel(), (rows, points.feature_ids.ravel())),
      shape=(len(points), int(points.feature_ids.max(initial=0)) + 1))


def other_held_labels(label_sets: Sequence[np.ndarray], example_points: np.ndarray,
                      example_labels: np.ndarray,
                      client_examples: Dict[Any, np.ndarray]) -> np.ndarray:
  """[examples, W] int32: each example's other labels that its client also
  holds (labels of its point besides its own), padded with -1; W is the most
  any example has (0 where each client holds one label). A client knows these
  as labels of its own data, so they are never its negatives for the example.
  Vectorized over the (example, point label) pairs."""
  num_examples = len(example_labels)
  client_of = np.zeros(num_examples, np.int64)
  for index, rows in enumerate(client_examples.values()):
    client_of[rows] = index
  num_labels = int(max(example_labels.max(initial=0),
                       max((int(l.max(initial=0)) for l in label_sets), default=0))) + 1
  held = np.unique(client_of * num_labels + example_labels)  # (client, label) keys.
  sizes = np.array([len(label_sets[p]) for p in example_points], np.int64)
  example = np.repeat(np.arange(num_examples), sizes)
  label = (np.concatenate([label_sets[p] for p in example_points]).astype(np.int64)
           if num_examples else np.zeros(0, np.int64))
  keep = (label != example_labels[example]) & np.isin(
      client_of[example] * num_labels + label, held)
  example, label = example[keep], label[keep]
  counts = np.bincount(example, minlength=num_examples)
  table = np.full((num_examples, int(counts.max(initial=0))), -1, np.int32)
  slot = np.arange(len(example)) - np.repeat(np.cumsum(counts) - counts, counts)
  table[example, slot] = label
  return table


def _clients(config: XCTaskConfig, train: PaddedPoints, example_points: np.ndarray,
             example_labels: np.ndarray) -> ClientDatasets:
  """The clients' examples: labels [N, 1 + W], the example's label then its
  other held labels (`other_held_labels`), or [N] where no example has one
  (one label a client)."""
  clients = partitions.partition_points(
      example_labels, config.partition, config.seed, config.labels_per_client,
      config.num_clients, config.dirichlet_alpha, train.label_sets,
      _feature_matrix(train) if config.partition == "confusable_labels" else None)
  labels = example_labels.astype(np.int32)
  others = other_held_labels(train.label_sets, example_points, example_labels, clients)
  if others.shape[1]:
    labels = np.concatenate([labels[:, None], others], axis=1)
  return ClientDatasets((train.feature_ids[example_points],
                         train.feature_values[example_points]),
                        labels, {str(c): p for c, p in clients.items()})


def _disjoint_class_task(config: XCTaskConfig, train_data: xc_io.XCData,
                         test_data: xc_io.XCData, dropped: int) -> "XCTask":
  """Training on some classes, validation and test on other, disjoint ones."""
  _, labels = _examples(list(train_data.labels) + list(test_data.labels), "sample",
                        config.seed)
  classes = np.unique(labels)
  rng = np.random.default_rng([config.seed, 3])
  held_out = rng.permutation(classes)[:int(round(config.held_out_class_fraction *
                                                 len(classes)))]
  num_val = max(1, int(round(config.validation_fraction * len(held_out))))
  if len(held_out) - num_val < 1:
    raise ValueError("--xc_class_split=disjoint: too few classes to hold out "
                     f"validation and test classes ({len(classes)} classes)")
  (rows,), cut, scaling = _padded_splits(
      config, scipy.sparse.vstack([train_data.features, test_data.features]).tocsr())
  pooled = PaddedPoints(*rows, [np.array([y]) for y in labels])
  train_rows = np.flatnonzero(~np.isin(labels, held_out))
  train = pooled.subset(train_rows)
  examples = np.arange(len(train_rows))
  return XCTask(config, train_data.num_labels, train_data.num_features, train,
                examples, labels[train_rows],
                _clients(config, train, examples, labels[train_rows]),
                pooled.subset(np.flatnonzero(np.isin(labels, held_out[:num_val]))),
                pooled.subset(np.flatnonzero(np.isin(labels, held_out[num_val:]))),
                dropped, cut, scaling)


def fingerprint(task: XCTask, points: Optional[np.ndarray] = None,
                labels: Optional[np.ndarray] = None) -> str:
  """A short hash of training examples (default: the clients', with their
  other held labels where clients hold several) and the features (for run
  configs)."""
  points = task.example_points if points is None else points
  if labels is None:
    labels = task.example_labels if task.clients.labels.ndim == 1 else task.clients.labels
  digest = hashlib.sha256(np.ascontiguousarray(labels).tobytes())
  digest.update(np.ascontiguousarray(points).tobytes())
  digest.update(task.train.feature_ids.tobytes())
  return digest.hexdigest()[:12]
