"""The classes nearest (by cosine) to a round's updated classes, in a table of
any size: the search behind FedAwS's top-k spreadout (`losses/class_spreadout`).

An exact search scores every updated class against the whole table, O(updated
x C) a round: at Amazon-670K's 670,000 labels that was most of a FedAwS
round. `ApproximateNeighbours` keeps an inverted file (faiss IVF, inner
product on L2-normalized rows, stored in float16) across rounds instead:
- the lists are the Voronoi cells of `nlist` = 4 sqrt(C) centroids, unit rows
  drawn (by the seed) from the initial table and never moved, so which list
  a row sits in depends only on its current value;
- each round only the rows the round changed are moved between lists;
- a query scans its `nprobe` nearest lists, about nprobe / nlist of the
  table, so a round's search grows as sqrt(C), not C;
- the scan reads float16 rows, half the bytes of float32 (the scan is bound
  by memory: 1,000 queries at 670k classes took 0.24 s instead of 0.33),
  and its `RERANK` x (k + 1) best are re-ranked on the float32 rows, so the
  order is the exact cosines' (scanning every list finds the exact top-k).
The index is therefore a function of the current table alone: a run resumed
from a checkpoint rebuilds it (one pass over the table) and finds the
neighbours the uninterrupted run found. Its recall@k against the exact search
is measured, never assumed (`recall_against_exact`, and
`scripts.benchmark_round_cost` prints it). It is asked for, never chosen for
the user: on Delicious (983 labels, half the lists scanned) FedAwS's test
P@1 was 48.0 with it against 49.0 exact at seed 0 (README).
"""

from typing import Optional

import numpy as np

SEARCHES = ("exact", "approximate")
NPROBE = 64
# Candidates of the float16 scan re-ranked in float32, per neighbour asked for.
RERANK = 2


def _normalized(rows: np.ndarray) -> np.ndarray:
  rows = np.asarray(rows, np.float32)
  return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def check_search(search: str) -> None:
  if search not in SEARCHES:
    raise ValueError(f"--spreadout_search must be one of {', '.join(SEARCHES)}, "
                     f"got '{search}'")


def exact_nearest(table: np.ndarray, class_ids: np.ndarray, k: int) -> np.ndarray:
  """[n, k] ids of the k classes nearest to each of `class_ids` (itself
  excluded), scoring every class: the reference the approximate search is
  measured against."""
  import faiss  # pylint: disable=g-import-not-at-top
  normalized = _normalized(table)
  _, rows = faiss.knn(normalized[class_ids], normalized, k + 1,
                      metric=faiss.METRIC_INNER_PRODUCT)
  return _without_self(rows, class_ids, k)


def _without_self(rows: np.ndarray, class_ids: np.ndarray, k: int) -> np.ndarray:
  """The k first of each row of `rows` [n, >= k] that are not the query's
  own class (or not -1, a slot the search left empty); a row short of k is
  padded with the query's own class, whose pull on itself is zero."""
  own = np.asarray(class_ids)[:, None]
  kept = (rows != own) & (rows >= 0)
  first = np.argsort(~kept, axis=1, kind="stable")[:, :k]  # Kept ones, in order.
  return np.where(np.take_along_axis(kept, first, 1), np.take_along_axis(rows, first, 1),
                  own).astype(np.int32)


class ApproximateNeighbours:
  """An inverted file over a class table whose rows change a few a round
  (module docstring). `nearest(before, table, changed, class_ids, k)`:
  `table` is `before` with the rows `changed` replaced; when `before` is the
  table the last call was told of (`moved`), only those rows are moved,
  otherwise (the first call, a resumed run) every row is placed anew."""

  def __init__(self, initial_table: np.ndarray, seed: int, nprobe: int = NPROBE):
    import faiss  # pylint: disable=g-import-not-at-top
    num_rows, dim = initial_table.shape
    nlist = max(1, min(num_rows, int(round(4 * np.sqrt(num_rows)))))
    rng = np.random.default_rng([seed, num_rows])
    centroids = _normalized(initial_table[np.sort(rng.choice(num_rows, nlist,
                                                              replace=False))])
    quantizer = faiss.IndexFlatIP(dim)
    quantizer.add(centroids)
    self._index = faiss.IndexIVFScalarQuantizer(
        quantizer, dim, nlist, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT,
        False)  # Rows stored as they are, not as residuals to their centroid.
    self._index.is_trained = True
    self._index.set_direct_map_type(faiss.DirectMap.Hashtable)
    self._index.nprobe = min(nprobe, nlist)
    self._quantizer = quantizer  # The index does not own it.
    self._table: Optional[np.ndarray] = None  # The table the lists hold.
    self.nlist, self.nprobe = nlist, self._index.nprobe

  def _place(self, table: np.ndarray, ids: np.ndarray) -> None:
    import faiss  # pylint: disable=g-import-not-at-top
    ids = np.unique(ids).astype(np.int64)
    self._index.remove_ids(faiss.IDSelectorArray(ids))
    self._index.add_with_ids(_normalized(table[ids]), ids)

  def moved(self, table: np.ndarray, ids: np.ndarray) -> None:
    """`table` is the last one the index holds with the rows `ids` changed."""
    self._place(table, ids)
    self._table = table

  def nearest(self, before: np.ndarray, table: np.ndarray, changed: np.ndarray,
              class_ids: np.ndarray, k: int) -> np.ndarray:
    """[n, k] ids of (approximately) the k classes nearest to `class_ids`."""
    if self._table is not None and before is self._table:
      self.moved(table, changed)
    else:
      self._index.reset()
      self._index.add_with_ids(_normalized(table), np.arange(len(table), dtype=np.int64))
      self._table = table
    queries = _normalized(table[class_ids])
    _, candidates = self._index.search(queries, RERANK * (k + 1))
    return _without_self(_reranked(table, queries, candidates), class_ids, k)


def _reranked(table: np.ndarray, queries: np.ndarray, candidates: np.ndarray
              ) -> np.ndarray:
  """`candidates` [n, m] (-1: an empty slot) ordered by their float32 cosine
  to `queries` [n, D] (unit rows), empty slots last."""
  rows = table[np.maximum(candidates, 0)]
  cosines = np.einsum("nd,nmd->nm", queries, rows) / np.maximum(
      np.sqrt(np.einsum("nmd,nmd->nm", rows, rows)), 1e-12)
  cosines[candidates < 0] = -np.inf
  return np.take_along_axis(candidates, np.argsort(-cosines, axis=1, kind="stable"), 1)


def recall_against_exact(found: np.ndarray, exact: np.ndarray) -> float:
  """The share of the exact neighbours (rows of `exact`) that `found` holds."""
  return float(np.mean([len(np.intersect1d(f, e)) / len(e) for f, e in zip(found, exact)]))
