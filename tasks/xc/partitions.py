"""Label partitions: training points (one label each) -> non-IID clients.

- `one_label_per_client`: a client per label, holding that label's points: the
  positive-only setting of FedAwS (each client sees one class).
- `k_labels_per_client`: labels shuffled (seeded) and dealt k to a client; a
  client holds the points of its labels (the FedSS paper's partition).
- `dirichlet`: `num_clients` clients; each label's points are spread over the
  clients with proportions drawn from Dirichlet(alpha): small alpha gives each
  client a few dominant labels, large alpha approaches IID.
Every partition returns, per client, the indices of its points (sorted), and
every point belongs to exactly one client.
"""

from typing import Dict, Optional

import numpy as np

PARTITIONS = ("one_label_per_client", "k_labels_per_client", "dirichlet")


def partition_points(labels: np.ndarray, partition: str, seed: int,
                     labels_per_client: int = 5, num_clients: Optional[int] = None,
                     alpha: float = 0.1) -> Dict[int, np.ndarray]:
  """Client id -> indices of its points, for the single training label of each point."""
  if partition not in PARTITIONS:
    raise ValueError(f"--partition must be one of {', '.join(PARTITIONS)}, got "
                     f"'{partition}'")
  labels = np.asarray(labels)
  rng = np.random.default_rng([seed, PARTITIONS.index(partition)])
  present = np.unique(labels)
  if partition == "one_label_per_client":
    group_of_label = {label: label for label in present}
  elif partition == "k_labels_per_client":
    if labels_per_client < 1:
      raise ValueError(f"--labels_per_client must be >= 1, got {labels_per_client}")
    shuffled = rng.permutation(present)
    group_of_label = {label: i // labels_per_client for i, label in enumerate(shuffled)}
  else:
    return _dirichlet(labels, rng, num_clients, alpha)
  lookup = np.full(labels.max() + 1 if len(labels) else 0, -1)
  lookup[list(group_of_label)] = list(group_of_label.values())
  return _by_client(lookup[labels])


def _by_client(client_of_point: np.ndarray) -> Dict[int, np.ndarray]:
  order = np.argsort(client_of_point, kind="stable")  # Keeps each client's points sorted.
  starts = np.flatnonzero(np.r_[True, np.diff(client_of_point[order]) != 0])
  return {int(client_of_point[order[s]]): part
          for s, part in zip(starts, np.split(order, starts[1:])) if len(part)}


def _dirichlet(labels: np.ndarray, rng: np.random.Generator,
               num_clients: Optional[int], alpha: float) -> Dict[int, np.ndarray]:
  if not num_clients or num_clients < 1:
    raise ValueError(f"--num_clients must be >= 1 for the dirichlet partition, got "
                     f"{num_clients}")
  if alpha <= 0:
    raise ValueError(f"--dirichlet_alpha must be > 0, got {alpha}")
  client_of_point = np.empty(len(labels), np.int64)
  for points in _by_client(labels).values():  # The points of each label.
    points = rng.permutation(points)
    shares = rng.dirichlet(np.full(num_clients, alpha))
    cuts = np.round(np.cumsum(shares)[:-1] * len(points)).astype(int)
    for client, part in enumerate(np.split(points, cuts)):
      client_of_point[part] = client
  return _by_client(client_of_point)
