"""Label partitions: training points (one label each) -> non-IID clients.

- `one_label_per_client`: a client per label, holding that label's points: the
  positive-only setting of FedAwS (each client sees one class).
- `k_labels_per_client`: labels shuffled (seeded) and dealt k to a client; a
  client holds the points of its labels (the FedSS paper's partition).
- `co_occurring_labels`: as `k_labels_per_client`, but a client's k labels are
  ones that occur together on training points (`co_occurring_groups`), as a
  user's photos share landmarks: the confusable classes of FedSS's clients.
- `confusable_labels`: as `k_labels_per_client`, but a client's k labels look
  alike (close feature centroids) and never label the same point
  (`confusable_groups`): paper 003's users, whose landmarks are distinct but
  confusable.
- `dirichlet`: `num_clients` clients; each label's points are spread over the
  clients with proportions drawn from Dirichlet(alpha): small alpha gives each
  client a few dominant labels, large alpha approaches IID.
Every partition returns, per client, the indices of its points (sorted), and
every point belongs to exactly one client.
"""

import itertools
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

# (A partition's position seeds its random stream: new ones go last.)
PARTITIONS = ("one_label_per_client", "k_labels_per_client", "dirichlet",
              "co_occurring_labels", "confusable_labels")


def partition_points(labels: np.ndarray, partition: str, seed: int,
                     labels_per_client: int = 5, num_clients: Optional[int] = None,
                     alpha: float = 0.1,
                     label_sets: Optional[Sequence[np.ndarray]] = None,
                     features: Optional[scipy.sparse.csr_matrix] = None
                     ) -> Dict[int, np.ndarray]:
  """Client id -> indices of its points, for the single training label of each
  point; `label_sets` (every label of every training point) for
  `co_occurring_labels` and `confusable_labels`, `features` (each training
  point's, [points, features]) for `confusable_labels`."""
  if partition not in PARTITIONS:
    raise ValueError(f"--partition must be one of {', '.join(PARTITIONS)}, got "
                     f"'{partition}'")
  labels = np.asarray(labels)
  rng = np.random.default_rng([seed, PARTITIONS.index(partition)])
  present = np.unique(labels)
  if partition == "one_label_per_client":
    group_of_label = {label: label for label in present}
  elif partition == "dirichlet":
    return _dirichlet(labels, rng, num_clients, alpha)
  else:
    if labels_per_client < 1:
      raise ValueError(f"--labels_per_client must be >= 1, got {labels_per_client}")
    if partition != "k_labels_per_client" and (
        label_sets is None or (partition == "confusable_labels" and features is None)):
      raise ValueError(f"the {partition} partition needs the points' label sets"
                       + (" and features" if partition == "confusable_labels" else ""))
    if partition == "k_labels_per_client":
      shuffled = rng.permutation(present)
      group_of_label = {label: i // labels_per_client for i, label in enumerate(shuffled)}
    elif partition == "co_occurring_labels":
      group_of_label = co_occurring_groups(present, label_sets, labels_per_client)
    else:
      group_of_label = confusable_groups(present, label_sets, features, labels_per_client)
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


def _label_statistics(labels: np.ndarray, label_sets: Sequence[np.ndarray]
                      ) -> Tuple[scipy.sparse.csr_matrix, scipy.sparse.csr_matrix,
                                 np.ndarray]:
  """(membership [points, labels]: 1 where a point carries a label; shared
  [labels, labels]: the points two labels are both on; each label's points)."""
  num_labels = int(max([np.max(labels, initial=0)] +
                       [s.max(initial=0) for s in label_sets if len(s)])) + 1
  rows = np.repeat(np.arange(len(label_sets)), [len(s) for s in label_sets])
  columns = np.concatenate([np.asarray(s, np.int64) for s in label_sets] +
                           [np.zeros(0, np.int64)])
  membership = scipy.sparse.csr_matrix(
      (np.ones(len(rows), np.float64), (rows, columns)),
      shape=(len(label_sets), num_labels))
  return (membership, (membership.T @ membership).tocsr(),
          np.asarray(membership.sum(axis=0)).ravel())


def _row(matrix: scipy.sparse.csr_matrix, row: int) -> Tuple[List[int], List[float]]:
  span = slice(matrix.indptr[row], matrix.indptr[row + 1])
  return matrix.indices[span].tolist(), matrix.data[span].tolist()


def _greedy_groups(labels: np.ndarray, points: np.ndarray, size: int,
                   affinity: Callable[[int], Tuple[List[int], List[float]]],
                   banned: Callable[[int], List[int]] = lambda label: []
                   ) -> Dict[int, int]:
  """Label -> group: the free label (of `labels`) on most `points` opens a
  group, which then takes, one at a time, the free label of the largest summed
  `affinity` to its members so far and `banned` by none of them, or, when no
  such label has any, the free label on most points that none bans (any free
  one if all are)."""
  by_points = sorted(np.asarray(labels).tolist(), key=lambda label: (-points[label], label))
  free, group_of_label, opener = set(by_points), {}, 0

  def most_frequent_free() -> int:
    nonlocal opener
    while by_points[opener] not in free:
      opener += 1
    return by_points[opener]

  for group in itertools.count():
    if not free:
      break
    member, summed, excluded = most_frequent_free(), {}, set()
    for _ in range(size):
      free.discard(member)
      group_of_label[member] = group
      excluded.update(banned(member))
      for other, value in zip(*affinity(member)):
        if other in free:
          summed[other] = summed.get(other, 0.0) + value
      summed = {label: value for label, value in summed.items()
                if label in free and label not in excluded}
      if not free:
        break
      if summed:
        member = max(summed, key=lambda label: (summed[label], points[label], -label))
      else:
        allowed = (label for label in by_points[opener:]
                   if label in free and label not in excluded)
        member = next(allowed, None)
        member = most_frequent_free() if member is None else member
  return group_of_label


def co_occurring_groups(labels: np.ndarray, label_sets: Sequence[np.ndarray],
                        size: int) -> Dict[int, int]:
  """Label -> group, for groups of `size` of `labels` that occur together:
  `_greedy_groups` by the Jaccard similarity of the points two labels are on
  (not raw counts, so a label on every point does not join every group)."""
  _, shared, points = _label_statistics(labels, label_sets)

  def jaccard(member: int) -> Tuple[List[int], List[float]]:
    others, counts = _row(shared, member)
    return others, [count / (points[member] + points[other] - count)
                    for other, count in zip(others, counts)]

  return _greedy_groups(labels, points, size, jaccard)


def confusable_groups(labels: np.ndarray, label_sets: Sequence[np.ndarray],
                      features: scipy.sparse.csr_matrix, size: int,
                      nearest: int = 256) -> Dict[int, int]:
  """Label -> group, for groups of `size` of `labels` whose points look alike
  but that never label the same point (paper 003's users, whose photos show
  distinct but visually confusable landmarks): `_greedy_groups` by the cosine
  of the labels' feature centroids (each point's features at unit length),
  any label that shares a point with a member barred."""
  membership, shared, points = _label_statistics(labels, label_sets)
  unit = scipy.sparse.diags(1 / np.maximum(
      scipy.sparse.linalg.norm(features, axis=1), 1e-12)) @ features
  centroids = (membership.T @ unit).tocsr()  # [L, F]
  centroids = (scipy.sparse.diags(1 / np.maximum(
      scipy.sparse.linalg.norm(centroids, axis=1), 1e-12)) @ centroids).tocsr()
  present = np.asarray(labels, np.int64)
  present_centroids = centroids[present]

  def cosine(member: int) -> Tuple[List[int], List[float]]:
    """The `nearest` labels' cosines (a group needs no farther ones)."""
    values = (present_centroids @ centroids[member].T).toarray().ravel()
    top = np.argpartition(-values, min(nearest, len(values)) - 1)[:nearest]
    return present[top].tolist(), values[top].tolist()

  return _greedy_groups(labels, points, size, cosine, lambda member: _row(shared, member)[0])

