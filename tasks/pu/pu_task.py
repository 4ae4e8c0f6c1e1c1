"""The PU task: an image set, a PU partition, class priors, client datasets.

A setting (`PUSetting`) is one row of the paper's Tables 1-3: the division
(iid or shards), the positive classes per client and whether they overlap.
`SETTINGS` names the paper's rows; `DEFAULT_SETTINGS` is the comparison's
default subset.

Class priors (`priors`): the risk of client k weighs classes by rho^k, the
class mix of its unlabeled points (see `losses.pu_risk`):
- `true`: counted from the hidden labels of those points (the paper assumes
  the priors are given);
- `estimated`: from what clients can report without their data: a client
  labeling class i with fraction lambda holds about n^k_i / lambda points of
  it, so pi_i ~ mean over those clients of n^k_i / (lambda n_k) (normalized);
  then rho^k_i ~ (1 - lambda) pi_i on its positive classes and pi_j on the
  others. This assumes the client's points are IID draws (exact in
  expectation for `iid`; only a rough guess for `shards`);
- `uniform`: pi_i = 1 / C, then rho^k as for `estimated`.
Validation points (early stopping) are a seeded, stratified share of the
training set held out of every client.
"""

import dataclasses
import sys
from typing import Dict, Optional, Tuple

import numpy as np

from losses import pu_risk
from tasks import client_data
from tasks.pu import image_io
from tasks.pu import pu_partitions
from tasks.pu.image_io import ImageSet

PRIORS = ("true", "estimated", "uniform")


@dataclasses.dataclass(frozen=True)
class PUSetting:
  """How clients split the data and which classes they label."""
  division: str
  positive_classes: Tuple[int, ...]
  overlap: bool
  shards_per_client: int = 5  # shards only
  num_shards: int = 50  # shards only

  def describe(self) -> str:
    counts = self.positive_classes
    who = (f"{len(counts)}x{counts[0]}" if len(set(counts)) == 1
           else "[" + ",".join(map(str, counts)) + "]")
    data = "iid" if self.division == "iid" else f"{self.shards_per_client}-class non-iid"
    return f"{data} {who} {'overlap' if self.overlap else 'no overlap'}"


def _shards(per_client: int, counts: Tuple[int, ...], overlap: bool) -> PUSetting:
  return PUSetting("shards", counts, overlap, per_client, 10 * per_client)


SETTINGS: Dict[str, PUSetting] = {
    # Table 1: iid, balanced.
    "iid_10x2_overlap": PUSetting("iid", (2,) * 10, True),
    "iid_4x6_overlap": PUSetting("iid", (6,) * 4, True),
    "iid_2x9_overlap": PUSetting("iid", (9,) * 2, True),
    "iid_10x1": PUSetting("iid", (1,) * 10, False),
    "iid_5x2": PUSetting("iid", (2,) * 5, False),
    "iid_2x5": PUSetting("iid", (5,) * 2, False),
    # Table 2: iid, imbalanced.
    "iid_2_3_4_6_7_8_overlap": PUSetting("iid", (2, 3, 4, 6, 7, 8), True),
    "iid_1_2_4_6_7_overlap": PUSetting("iid", (1, 2, 4, 6, 7), True),
    "iid_2_4_6_8_overlap": PUSetting("iid", (2, 4, 6, 8), True),
    "iid_3_7": PUSetting("iid", (3, 7), False),
    "iid_2_3_5": PUSetting("iid", (2, 3, 5), False),
    "iid_1_2_3_4": PUSetting("iid", (1, 2, 3, 4), False),
    # Table 3: non-iid shards (5-class: 50 shards, 2-class: 20 shards).
    "noniid5_10x2_overlap": _shards(5, (2,) * 10, True),
    "noniid5_10x1": _shards(5, (1,) * 10, False),
    "noniid5_4_4_3_3_2_2_1_1_1_1_overlap": _shards(5, (4, 4, 3, 3, 2, 2, 1, 1, 1, 1),
                                                   True),
    "noniid2_10x1": _shards(2, (1,) * 10, False),
}
DEFAULT_SETTINGS = ("iid_10x2_overlap", "iid_5x2", "iid_2_3_5", "noniid5_10x1")


@dataclasses.dataclass(frozen=True)
class PUTaskConfig:
  data: str = "digits"
  data_path: Optional[str] = None
  setting: PUSetting = SETTINGS["iid_5x2"]
  labeled_fraction: float = 0.5
  priors: str = "true"
  test_fraction: float = 0.2  # When the source has one split (digits, 10k files).
  validation_fraction: float = 0.1
  seed: int = 0

  def __post_init__(self):
    if self.priors not in PRIORS:
      raise ValueError(f"--class_priors must be one of {', '.join(PRIORS)}, got "
                       f"'{self.priors}'")
    if not 0 < self.validation_fraction < 1:
      raise ValueError(f"--pu_validation_fraction must be in (0, 1), got "
                       f"{self.validation_fraction}")

  def describe(self) -> Dict:
    return {**dataclasses.asdict(self), "setting": dataclasses.asdict(self.setting)}


def client_priors(partition: pu_partitions.PUPartition, labels: np.ndarray,
                  mode: str, labeled_fraction: float) -> Dict[int, np.ndarray]:
  """rho^k per client: the class mix of its unlabeled points (module docstring)."""
  num_classes = partition.num_classes
  if mode == "true":
    priors = {}
    for k, points in partition.client_points.items():
      hidden = labels[points[~partition.labeled[points]]]
      counts = np.bincount(hidden, minlength=num_classes).astype(float)
      priors[k] = counts / max(counts.sum(), 1.0)
    return priors
  if mode == "uniform":
    global_prior = np.full(num_classes, 1.0 / num_classes)
  else:
    shares = [[] for _ in range(num_classes)]
    for k, points in partition.client_points.items():
      seen = np.bincount(labels[points[partition.labeled[points]]], minlength=num_classes)
      for i in partition.positive_classes[k]:
        shares[i].append(seen[i] / (labeled_fraction * len(points)))
    global_prior = np.array([np.mean(s) if s else 0.0 for s in shares])
    global_prior /= global_prior.sum()
  priors = {}
  for k, classes in partition.positive_classes.items():
    mix = global_prior.copy()
    mix[classes] *= 1.0 - labeled_fraction
    priors[k] = mix / mix.sum()
  return priors


@dataclasses.dataclass
class PUTask:
  config: PUTaskConfig
  train: ImageSet  # The clients' points (validation held out).
  validation: ImageSet
  test: ImageSet
  partition: pu_partitions.PUPartition
  priors: Dict[int, np.ndarray]

  @property
  def num_classes(self) -> int:
    return self.partition.num_classes

  @property
  def input_shape(self) -> Tuple[int, int, int]:
    return tuple(self.train.images.shape[1:])

  def num_clients(self) -> int:
    return len(self.partition.client_points)

  def mean_client_points(self) -> float:
    """The points a client holds, on average."""
    return float(np.mean([len(rows) for rows in self.partition.client_points.values()]))

  def client_datasets(self, method: str) -> client_data.ClientDatasets:
    """The clients' points with their packed risk coefficients under `method`
    (`positive_only` clients hold only their labeled points)."""
    targets = np.zeros((len(self.train), 3 * self.num_classes + 1), np.float32)
    points = {}
    for k, rows in self.partition.client_points.items():
      if method == "positive_only":
        rows = rows[self.partition.labeled[rows]]
      points[str(k)] = rows
      cross = (pu_risk.cross_client_weights(self.partition.positive_classes,
                                            self.priors, self.num_classes, k)
               if method == "fedpu" else None)
      targets[rows] = pu_risk.pu_targets(
          method, self.train.labels[rows], self.partition.labeled[rows],
          self.partition.positive_classes[k], self.num_classes, self.priors[k], cross)
    return client_data.ClientDatasets(self.train.images, targets, points)


def build_pu_task(config: PUTaskConfig) -> PUTask:
  """Loads the images, splits them and partitions them over the clients,
  saying so on stderr."""
  print(f"PU: reading {config.data_path or config.data} ({config.setting.describe()})",
        file=sys.stderr, flush=True)
  train, test = image_io.load_image_set(config.data, config.data_path, config.seed,
                                        config.test_fraction)
  train, validation = image_io.split_seeded(train, config.validation_fraction,
                                            config.seed + 1, "pu_validation_fraction")
  setting = config.setting
  partition = pu_partitions.partition_pu(
      train.labels, setting.positive_classes, setting.overlap, config.labeled_fraction,
      config.seed, setting.division, setting.num_shards, setting.shards_per_client)
  priors = client_priors(partition, train.labels, config.priors, config.labeled_fraction)
  print(f"PU: {len(train.labels)} training images on {len(partition.client_points)} "
        f"clients, {len(validation.labels)} validation, {len(test.labels)} test",
        file=sys.stderr, flush=True)
  return PUTask(config, train, validation, test, partition, priors)
