"""Label partitions: training points (one label each) -> non-IID clients.

- `one_label_per_client`: a client per label, holding that label's points: the
  positive-only setting of FedAwS (each client sees one class).
- `k_labels_per_client`: labels shuffled (seeded) and dealt k to a client; a
  client holds the points of its labels (the FedSS paper's partition).
- `co_occurring_labels`: as `k_labels_per_client`, but a client's k labels are
  ones that occur together on training points (`co_occurring_groups`), as a
  user's photos share landmarks: the confusable classes of FedSS's clients.
- `dirichlet`: `num_clients` clients; each label's points are spread over the
  clients with proportions drawn from Dirichlet(alpha): small alpha gives each
  client a few dominant labels, large alpha approaches IID.
Every partition returns, per client, the indices of its points (sorted), and
every point belongs to exactly one client.
"""

import itertools
from typing import Dict, Optional, Sequence

import numpy as np
import scipy.sparse

PARTITIONS = ("one_label_per_client", "k_labels_per_client", "co_occurring_labels",
              "dirichlet")


def partition_points(labels: np.ndarray, partition: str, seed: int,
                     labels_per_client: int = 5, num_clients: Optional[int] = None,
                     alpha: float = 0.1,
                     label_sets: Optional[Sequence[np.ndarray]] = None
                     ) -> Dict[int, np.ndarray]:
  """Client id -> indices of its points, for the single training label of each
  point; `label_sets` (every label of every training point) for
  `co_occurring_labels`."""
  if partition not in PARTITIONS:
    raise ValueError(f"--partition must be one of {', '.join(PARTITIONS)}, got "
                     f"'{partition}'")
  labels = np.asarray(labels)
  rng = np.random.default_rng([seed, PARTITIONS.index(partition)])
  present = np.unique(labels)
  if partition == "one_label_per_client":
    group_of_label = {label: label for label in present}
  elif partition in ("k_labels_per_client", "co_occurring_labels"):
    if labels_per_client < 1:
      raise ValueError(f"--labels_per_client must be >= 1, got {labels_per_client}")
    if partition == "k_labels_per_client":
      shuffled = rng.permutation(present)
      group_of_label = {label: i // labels_per_client for i, label in enumerate(shuffled)}
    elif label_sets is None:
      raise ValueError("the co_occurring_labels partition needs the points' label sets")
    else:
      group_of_label = co_occurring_groups(present, label_sets, labels_per_client)
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


def co_occurring_groups(labels: np.ndarray, label_sets: Sequence[np.ndarray],
                        size: int) -> Dict[int, int]:
  """Label -> group, for groups of `size` of `labels` that occur together.

  Greedy: the label (of `labels`) on most points that is not yet in a group
  opens one, which then takes, one at a time, the free label most similar to
  its members so far (the sum of Jaccard similarities of the points they are
  on, so a label on every point does not join every group), or, when no free
  label shares a point with them, the free label on most points. It reads only
  the co-occurrences of each group's members: O(points' label pairs).
  """
  labels = np.asarray(labels, np.int64)
  num_labels = int(max([labels.max(initial=0)] + [s.max(initial=0) for s in label_sets
                                                  if len(s)])) + 1
  rows = np.repeat(np.arange(len(label_sets)), [len(s) for s in label_sets])
  columns = np.concatenate([np.asarray(s, np.int64) for s in label_sets] +
                           [np.zeros(0, np.int64)])
  membership = scipy.sparse.csr_matrix(
      (np.ones(len(rows), np.float64), (rows, columns)),
      shape=(len(label_sets), num_labels))
  shared = (membership.T @ membership).tocsr()  # [L, L]: points two labels share.
  points = np.asarray(membership.sum(axis=0)).ravel()
  by_points = sorted(labels.tolist(), key=lambda label: (-points[label], label))
  free, group_of_label, opener = set(by_points), {}, 0

  def most_frequent_free() -> int:
    nonlocal opener
    while by_points[opener] not in free:
      opener += 1
    return by_points[opener]

  for group in itertools.count():
    if not free:
      break
    member, similarity = most_frequent_free(), {}
    for _ in range(size):
      free.discard(member)
      group_of_label[member] = group
      row = slice(shared.indptr[member], shared.indptr[member + 1])
      for other, count in zip(shared.indices[row].tolist(), shared.data[row].tolist()):
        if other in free:
          similarity[other] = similarity.get(other, 0.0) + count / (
              points[member] + points[other] - count)
      similarity.pop(member, None)
      if not free:
        break
      member = (max(similarity, key=lambda label: (similarity[label], points[label], -label))
                if similarity else most_frequent_free())
  return group_of_label
