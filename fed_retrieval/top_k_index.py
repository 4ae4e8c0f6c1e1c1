"""Top-k retrieval over a table of embeddings, exact or approximate.

The interface every index serves (`TopKIndex`): `search(queries [B, D], k)` ->
(scores [B, k], rows [B, k]) of the table rows with the largest dot products,
best first; an approximate index may return fewer than k real rows, which it
pads with row -1 and score -inf. `save(directory)` writes it beside an
`index.json` (`IndexInfo`: kind, parameters, the table's fingerprint, the
recall it was measured at); `load(directory, table)` reads it back and refuses
an index built for another table.

- `brute_force`: every row scored (chunked, so memory stays B x chunk).
- `approximate`: faiss's inverted file over product-quantized codes with an
  exact re-ranking (`IVF{nlist},PQ{D/2}x4fs,RFlat`): the rows are clustered
  into `nlist` lists by k-means; a query scores the centroids, scans the 4-bit
  codes of its `nprobe` best lists (SIMD "fast scan"), and re-ranks the
  `k_factor * k` best candidates by their exact dot products. Memory: the rows
  (for the re-ranking), D/4 bytes of codes and an 8-byte id a row. Below 624
  rows or at an odd width the lists hold the rows themselves (`IVF{nlist},Flat`).
  At build time `nprobe` (a power of two) and `k_factor` (16 or 64) are the
  cheapest whose recall@k against the exact top-k on the given calibration
  queries reaches the target; if scanning every list does not, `k_factor`
  doubles until it does (re-ranking every row is exact). So the target is
  always met on those queries, and the recall is stated, never assumed.
"""

import dataclasses
import hashlib
import json
import os
from typing import Any, Dict, Optional, Protocol, Tuple

import numpy as np

KINDS = ("brute_force", "approximate")
AUTO = "auto"
# `auto` picks the approximate index from this many rows up. Measured at batch
# 1 on 2 cores: ml-latest-small's 9,724 x 16 items, brute force 7,728 q/s and
# the approximate index 550-1,650 (faiss's per-query cost dominates); 100k x 64
# synthetic rows, brute force 484 q/s and the approximate index 20,540 (0.986
# recall@10). Every XC and MovieLens development table lies below it (exact).
APPROXIMATE_FROM = 100_000
TARGET_RECALL = 0.95
INFO = "index.json"
_FAISS_FILE = "index.faiss"

SearchResult = Tuple[np.ndarray, np.ndarray]


@dataclasses.dataclass(frozen=True)
class IndexInfo:
  """What an index is and how good it was measured to be."""
  kind: str
  num_rows: int
  dim: int
  fingerprint: str
  params: Dict[str, Any] = dataclasses.field(default_factory=dict)
  recall: Dict[str, Any] = dataclasses.field(default_factory=dict)


class TopKIndex(Protocol):
  info: IndexInfo

  def search(self, queries: np.ndarray, k: int) -> SearchResult:
    ...

  def save(self, directory: str) -> None:
    ...


def table_fingerprint(table: np.ndarray) -> str:
  """A short hash of the table's shape and values (which table an index is for)."""
  table = np.ascontiguousarray(table, np.float32)
  digest = hashlib.sha256(str(table.shape).encode())
  digest.update(table.tobytes())
  return digest.hexdigest()[:16]


def resolve_kind(kind: str, num_rows: int) -> str:
  """`auto` -> the kind used for a table of `num_rows` rows; others as given."""
  if kind == AUTO:
    return "approximate" if num_rows >= APPROXIMATE_FROM else "brute_force"
  if kind not in KINDS:
    raise ValueError(f"--index={kind}: one of {', '.join((AUTO,) + KINDS)}")
  return kind


def _check_query(queries: np.ndarray, k: int, info: IndexInfo) -> np.ndarray:
  queries = np.ascontiguousarray(queries, np.float32)
  if queries.ndim != 2 or queries.shape[1] != info.dim:
    raise ValueError(f"queries of shape {queries.shape} for an index of width {info.dim}")
  if not 1 <= k <= info.num_rows:
    raise ValueError(f"k={k} must lie in [1, {info.num_rows}] (the index's rows)")
  return queries


def _top_columns(scores: np.ndarray, k: int) -> np.ndarray:
  """Columns of the (at most) k largest scores of each row, in no order."""
  keep = min(k, scores.shape[1])
  return np.argpartition(-scores, keep - 1, axis=1)[:, :keep]


class BruteForceIndex:
  """Exact top-k: every row scored, in chunks of at most `chunk_scores` scores
  (64 MB) per call."""

  def __init__(self, table: np.ndarray, chunk_scores: int = 1 << 24,
               info: Optional[IndexInfo] = None):
    self.table = np.ascontiguousarray(table, np.float32)
    self.chunk_scores = chunk_scores
    self.info = info or IndexInfo("brute_force", len(self.table), self.table.shape[1],
                                  table_fingerprint(self.table))

  def search(self, queries: np.ndarray, k: int) -> SearchResult:
    queries = _check_query(queries, k, self.info)
    best_scores = np.zeros([len(queries), 0], np.float32)
    best_rows = np.zeros([len(queries), 0], np.int64)
    chunk_rows = max(k, self.chunk_scores // len(queries))
    for start in range(0, len(self.table), chunk_rows):
      scores = queries @ self.table[start:start + chunk_rows].T
      top = _top_columns(scores, k)
      best_scores = np.concatenate(
          [best_scores, np.take_along_axis(scores, top, axis=1)], axis=1)
      best_rows = np.concatenate([best_rows, top + start], axis=1)
      top = _top_columns(best_scores, k)
      best_scores = np.take_along_axis(best_scores, top, axis=1)
      best_rows = np.take_along_axis(best_rows, top, axis=1)
    order = np.lexsort((best_rows, -best_scores), axis=1)  # Best first, ties by row.
    return (np.take_along_axis(best_scores, order, axis=1),
            np.take_along_axis(best_rows, order, axis=1))

  def save(self, directory: str) -> None:
    _write_info(directory, self.info)


class ApproximateIndex:
  """faiss IVF-PQ with exact re-ranking, inner product (module docstring)."""

  def __init__(self, faiss_index, info: IndexInfo):
    self._index = faiss_index
    self.info = info

  def with_search(self, nprobe: Optional[int] = None,
                  k_factor: Optional[float] = None) -> "ApproximateIndex":
    """The same index searched with another nprobe or k_factor (a recall no
    longer measured)."""
    params = {**self.info.params, **{key: value for key, value in
                                     (("nprobe", nprobe), ("k_factor", k_factor))
                                     if value is not None}}
    return ApproximateIndex(self._index, dataclasses.replace(
        self.info, params=params, recall={}))

  @classmethod
  def build(cls, table: np.ndarray, calibration_queries: np.ndarray,
            nlist: Optional[int] = None, k: int = 10,
            target_recall: float = TARGET_RECALL, seed: int = 0,
            calibrated_on: str = "calibration queries") -> "ApproximateIndex":
    """Clusters `table` into `nlist` lists (default: 4 sqrt(rows), at least 39
    rows a list as faiss's k-means asks) and picks nprobe and k_factor on
    the queries."""
    import faiss  # pylint: disable=g-import-not-at-top
    table = np.ascontiguousarray(table, np.float32)
    if not 0 < target_recall <= 1:
      raise ValueError(f"target recall {target_recall} must lie in (0, 1]")
    k = min(k, len(table))
    nlist = nlist or max(1, min(int(4 * np.sqrt(len(table))), len(table) // 39))
    structure = _structure(nlist, len(table), table.shape[1])
    index = faiss.index_factory(table.shape[1], structure, faiss.METRIC_INNER_PRODUCT)
    faiss.extract_index_ivf(index).cp.seed = seed
    sample = np.random.default_rng(seed).permutation(len(table))[:64 * nlist]
    index.train(table[np.sort(sample)])
    index.add(table)
    exact = BruteForceIndex(table)
    queries = _check_query(calibration_queries, k, exact.info)
    exact_rows = exact.search(queries, k)[1]
    params = {"library": f"faiss {faiss.__version__}", "structure": structure,
              "metric": "inner product", "nlist": nlist}
    for nprobe, k_factor in _search_settings(nlist, len(table) / k,
                                             structure.endswith("RFlat")):
      candidate = cls(index, IndexInfo(
          "approximate", len(table), table.shape[1], exact.info.fingerprint,
          {**params, "nprobe": nprobe, "k_factor": k_factor}))
      recall = overlap_recall(candidate.search(queries, k)[1], exact_rows)
      if recall >= target_recall:
        break
    return cls(index, dataclasses.replace(candidate.info, recall={
        f"recall@{k}": recall, "target": target_recall, "queries": len(queries),
        "on": calibrated_on}))

  def search(self, queries: np.ndarray, k: int) -> SearchResult:
    import faiss  # pylint: disable=g-import-not-at-top
    lists = faiss.SearchParametersIVF(nprobe=int(self.info.params["nprobe"]))
    params = (faiss.IndexRefineSearchParameters(
        k_factor=float(self.info.params["k_factor"]), base_index_params=lists)
              if self.info.params["structure"].endswith("RFlat") else lists)
    scores, rows = self._index.search(_check_query(queries, k, self.info), k,
                                      params=params)
    return np.where(rows < 0, -np.inf, scores).astype(np.float32), rows

  def save(self, directory: str) -> None:
    import faiss  # pylint: disable=g-import-not-at-top
    os.makedirs(directory, exist_ok=True)
    faiss.write_index(self._index, os.path.join(directory, _FAISS_FILE))
    _write_info(directory, self.info)

  @property
  def memory_bytes(self) -> int:
    """Bytes of the serialized index (rows, ids, centroids)."""
    import faiss  # pylint: disable=g-import-not-at-top
    return int(faiss.serialize_index(self._index).nbytes)


def _search_settings(nlist: int, max_k_factor: float, re_ranked: bool):
  """(nprobe, k_factor) from the cheapest up: nprobe 1, 2, 4, .. nlist, each
  with k_factor 16 then 64; then every list with k_factor doubling until every
  row is re-ranked (exact)."""
  nprobes = sorted({min(2 ** i, nlist) for i in range(int(np.log2(nlist)) + 2)})
  if not re_ranked:
    yield from ((nprobe, 1) for nprobe in nprobes)
    return
  for nprobe in nprobes:
    yield from ((nprobe, k_factor) for k_factor in (16, 64))
  k_factor = 128
  while k_factor < 2 * max_k_factor:
    yield nlist, k_factor
    k_factor *= 2


def _structure(nlist: int, rows: int, dim: int) -> str:
  """faiss's description of the index: an inverted file whose lists hold 4-bit
  product-quantized codes of the rows (two dimensions a code, scanned with
  SIMD), the k_factor * k best re-ranked by their exact rows (`RFlat`). Rows
  of odd width, and tables too small to train 16 codes a subspace on (39
  rows a code, as faiss's k-means asks), are stored whole (`Flat`)."""
  if dim % 2 or rows < 39 * 16:
    return f"IVF{nlist},Flat"
  return f"IVF{nlist},PQ{dim // 2}x4fs,RFlat"


def overlap_recall(found_rows: np.ndarray, exact_rows: np.ndarray) -> float:
  """Mean share of each query's exact top-k rows among the rows found [B, k]."""
  k = exact_rows.shape[1]
  hits = [len(np.intersect1d(found[found >= 0], exact)) for found, exact in
          zip(found_rows[:, :k], exact_rows)]
  return float(np.mean(hits) / k)


def _write_info(directory: str, info: IndexInfo) -> None:
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, INFO), "w") as f:
    json.dump(dataclasses.asdict(info), f, indent=2)


def _read_info(directory: str) -> IndexInfo:
  path = os.path.join(directory, INFO)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{directory}: no index ({INFO} missing)")
  with open(path) as f:
    return IndexInfo(**json.load(f))


def load(directory: str, table: np.ndarray) -> TopKIndex:
  """The index saved in `directory`, checked to be `table`'s."""
  info = _read_info(directory)
  fingerprint = table_fingerprint(table)
  if (info.num_rows, info.dim, info.fingerprint) != (len(table), table.shape[1],
                                                     fingerprint):
    raise ValueError(
        f"{directory}: the index was built for another table ({info.num_rows} x "
        f"{info.dim}, fingerprint {info.fingerprint}; this one is {len(table)} x "
        f"{table.shape[1]}, {fingerprint})")
  if info.kind == "brute_force":
    return BruteForceIndex(table, info=info)
  import faiss  # pylint: disable=g-import-not-at-top
  return ApproximateIndex(faiss.read_index(os.path.join(directory, _FAISS_FILE)), info)
