"""The classes nearest (by cosine) to a round's updated classes, in a table of
any size: the search behind FedAwS's top-k spreadout (`losses/class_spreadout`).

An exact search scores every updated class against the whole table, O(updated
x C) a round: at Amazon-670K's 670,000 labels that was most of a FedAwS
round. `ApproximateNeighbours` keeps an inverted file (faiss IVF, inner
product on L2-normalized rows, stored in float16) across rounds instead:
- the lists are the Voronoi cells of `nlist` = 2 sqrt(C) centroids, unit rows
  drawn (by the seed) from the initial table and never moved, so which list
  a row sits in depends only on its current value. Not the 4 sqrt(C) of an
  index searched by queries alone: each round also scores the rows it moves
  (~10 times its queries, counted one-off) against every centroid, and with `NPROBE` 32 of
  2 sqrt(C) a query scans the share of the table 64 of 4 sqrt(C) did. At
  670k classes the driver took 0.44-0.48 CPU s a 100-client round against
  0.55-0.57 (`benchmark_round_cost`, alternated; one-off), and at 4,000
  clients (~310,000 moved rows) three shards together 12.8 and 17.4 CPU s
  a round against 20.4 and 19.5 (one worker, two runs each); fewer, larger
  cells probed cost recall on loose clusters (0.91 -> 0.86 at recall@10,
  `test_class_neighbours`), and on Delicious FedAwS's test P@1 was 50.7
  +- 0.9 against 48.5 +- 0.7 with 4 sqrt(C) (seeds 0-2, each seed higher;
  exact 50.8 +- 1.0); on Bibtex every list is scanned either way;
- each round only the rows the round changed are moved between lists, those
  the spreadout step moved in a thread of their own while the next round's
  clients train (at 670k classes a 100-client round 0.53-0.61 s -> 0.49-0.54);
- a query scans its `nprobe` nearest lists, about nprobe / nlist of the
  table, so a round's search grows as sqrt(C), not C;
- the scan reads float16 rows, half the bytes of float32 (1,000 queries at
  670k classes took 0.24 s instead of 0.33); in float16 faiss's work a row
  (~15 ns a core) bounds it, not memory: bfloat16 or 8-bit rows, or the
  queries sorted by their lists, scanned as fast (0.09-0.11 s on 2 cores,
  one-off),
  and its `RERANK` x (k + 1) best are re-ranked by their float32 cosines, so
  the order is the exact cosines' (scanning every list finds the exact top-k);
- the lists may live in `ListShard`s on other machines (`RemoteShard`,
  `use_remote_shards`): each places a share of the moved rows (and drops
  the moved rows it held), finds the lists of a share of the queries
  (`assign`), then each scans its rows in every query's lists and scores
  its best on the float32 rows it keeps; the server merges their best.
The index is therefore a function of the current table, bar a row near a
tie between two centroids (faiss's float sums, hence its list, depend on
the batch it is scored in): a run resumed from a checkpoint rebuilds it (one
pass over the table) and finds the neighbours the uninterrupted run found,
bar such rows (there scored among the round's moved rows, here among the
whole table). Its recall@k against the exact search is measured, never
assumed (`recall_against_exact`, and `scripts.benchmark_round_cost` prints
it). It is asked for, never chosen for the user: the README states its
cost and recall at Amazon-670K's shape and its precision on Delicious.
"""

import concurrent.futures
import functools
import weakref
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from fed_retrieval.algorithms import row_ids
from fed_retrieval.runtime import array_service

SEARCHES = ("exact", "approximate")
NPROBE = 32
# Candidates of the float16 scan re-ranked in float32, per neighbour asked for.
RERANK = 2
RERANK_QUERIES = 2048  # Queries re-ranked at once (`_reranked`).


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


class ListShard:
  """The inverted lists of some of a table's rows: the part of an
  `ApproximateNeighbours` one process holds. Its methods take and return
  arrays only, so a shard is served to other machines as it is
  (`scripts.spreadout_shard`, `SERVED`)."""

  def __init__(self):
    self._index = None
    self._generation = 0
    # The float32 rows the lists hold, for `search`'s cosines: row id i is
    # `_rows[_slot_of[i]]` (-1: not held); the slots of rows dropped since
    # are `_free`, reused first.
    self._forget(0)

  def _check(self, generation: np.ndarray) -> None:
    if int(generation) != self._generation:
      raise RuntimeError("another index configured this shard since (one run "
                         "uses a shard at a time)")

  def configure(self, centroids: np.ndarray, nprobe: np.ndarray) -> tuple:
    """Empty lists around `centroids` (unit rows, never moved), `nprobe` of
    them scanned a query: ([generation]), which the other methods take first
    so that an index another one replaced on the shard fails loudly."""
    import faiss  # pylint: disable=g-import-not-at-top
    nlist, dim = centroids.shape
    quantizer = faiss.IndexFlatIP(dim)
    quantizer.add(np.ascontiguousarray(centroids, np.float32))
    index = faiss.IndexIVFScalarQuantizer(
        quantizer, dim, nlist, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT,
        False)  # Rows stored as they are, not as residuals to their centroid.
    index.is_trained = True
    index.set_direct_map_type(faiss.DirectMap.Hashtable)
    index.nprobe = int(nprobe)
    # Queries split among the threads inside `search_preassigned` (mode 0
    # splits them in faiss's own `search`, which lists given bypass, so it ran
    # on one thread): 1,000 queries at 670k rows 0.087 s against 0.168 on 2
    # cores, the same CPU and the same ids and scores (one-off).
    index.parallel_mode = 3
    self._index, self._quantizer = index, quantizer  # The index does not own it.
    self._generation += 1
    self._forget(dim)
    return (np.int64(self._generation),)

  def _forget(self, dim: int) -> None:
    self._slot_of, self._free = np.zeros(0, np.int64), np.zeros(0, np.int64)
    self._rows, self._slots = np.zeros((0, dim), np.float32), 0

  def reset(self, generation: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> tuple:
    """The lists hold the table's `rows` of `ids` alone (`place`)."""
    self._check(generation)
    self._index.reset()
    self._forget(self._index.d)
    return self.place(generation, ids[:0], ids, rows)

  def place(self, generation: np.ndarray, dropped: np.ndarray, ids: np.ndarray,
            rows: np.ndarray) -> tuple:
    """The rows of `dropped` this shard holds leave its lists; the table's
    rows of `ids` (unique, among `dropped` if held anywhere) are now
    `rows`, held here: each, normalized here (on the shard's machine, not the
    driver's; row by row, the same bits in any batch), goes to the list of
    its nearest centroid, found by one search of all of `ids` (an index
    gives its shards block-aligned ranges of a round's rows, so each row is
    scored as in one search of them all: `assignment_ranges`), and is kept
    as it is for `search`'s cosines."""
    import faiss  # pylint: disable=g-import-not-at-top
    self._check(generation)
    dropped, ids = (np.ascontiguousarray(a, np.int64) for a in (dropped, ids))
    rows = np.asarray(rows, np.float32)
    self._index.remove_ids(faiss.IDSelectorArray(dropped))
    self._drop(dropped)
    unit = np.ascontiguousarray(_normalized(rows))
    # Lists found in one search, then given: `add_with_ids` would search
    # them in batches of 65,536, and a short last batch takes another path.
    _, lists = self._quantizer.search(unit, 1)
    self._index.add_core(len(ids), faiss.swig_ptr(unit), faiss.swig_ptr(ids),
                         faiss.swig_ptr(np.ascontiguousarray(lists[:, 0])))
    self._keep(ids, rows)
    return ()

  def _drop(self, ids: np.ndarray) -> None:
    """The slots of the rows of `ids` held here freed."""
    ids = ids[ids < len(self._slot_of)]
    slots = self._slot_of[ids]
    self._free = np.concatenate([self._free, slots[slots >= 0]])
    self._slot_of[ids] = -1

  def _keep(self, ids: np.ndarray, rows: np.ndarray) -> None:
    """`rows` kept as the float32 rows of `ids` (none held), a slot each:
    freed slots first, then new ones."""
    if len(ids) and ids.max() >= len(self._slot_of):
      self._slot_of = _grown(self._slot_of, int(ids.max()) + 1, -1)
    reused = min(len(ids), len(self._free))
    fresh = np.arange(self._slots, self._slots + len(ids) - reused)
    self._slot_of[ids] = np.concatenate([self._free[len(self._free) - reused:], fresh])
    self._free = self._free[:len(self._free) - reused]
    self._slots += len(fresh)
    if self._slots > len(self._rows):
      self._rows = _grown(self._rows, self._slots, 0)
    self._rows[self._slot_of[ids]] = rows

  def assign(self, generation: np.ndarray, queries: np.ndarray) -> tuple:
    """([n, nprobe] int32): the lists each unit query scans, those of the
    centroids with the largest inner products first (every shard of an
    index holds the same centroids, so any one assigns for all)."""
    self._check(generation)
    _, lists = self._quantizer.search(np.asarray(queries, np.float32), self._index.nprobe)
    return (lists.astype(np.int32),)

  def search(self, generation: np.ndarray, queries: np.ndarray, count: np.ndarray,
             lists: np.ndarray) -> tuple:
    """(inner products of the float16 rows, ids, float32 cosines) [n, count]
    of each unit query's `count` best rows among the lists it scans, `lists`
    (`assign`'s, from any shard of the index); an empty slot's id is -1
    (its cosine meaningless)."""
    self._check(generation)
    queries, lists = np.asarray(queries, np.float32), np.asarray(lists, np.int64)
    # The centroids' inner products are not read: rows are stored as they
    # are, not as residuals to their centroid.
    scores, ids = self._index.search_preassigned(
        queries, int(count), lists, np.zeros(lists.shape, np.float32))
    if not self._index.ntotal:  # No rows: every slot empty.
      return scores, ids, np.zeros(ids.shape, np.float32)
    return scores, ids, _cosines(self._rows, self._slot_of, queries, ids)


SERVED = ("configure", "reset", "place", "assign", "search")  # Served methods.


def assignment_ranges(num_rows: int, shards: int, block: int) -> List[Tuple[int, int]]:
  """Consecutive ranges of the queries (or of rows to place), one for each
  of the first shards, whose rows a shard scores against the centroids as
  one call over all of them would: faiss's flat search scores them in
  blocks of `block` (its `distance_compute_blas_query_bs`), so each range
  starts at a block's start and a short last block stays with the one
  before (searched alone, a handful of rows takes another path, whose float
  sums differ)."""
  blocks = max(1, num_rows // block)
  bounds = [i * block for i in range(blocks)] + [num_rows]
  return [(bounds[part[0]], bounds[part[-1] + 1])
          for part in np.array_split(np.arange(blocks), min(shards, blocks))]


class ApproximateNeighbours:
  """An inverted file over a class table whose rows change a few a round
  (module docstring). `nearest(before, table, changed, class_ids, k)`:
  `table` is `before` with the rows `changed` replaced; when `before` is the
  table the last call was told of (`moved`), only those rows are moved,
  otherwise (the first call, a resumed run) every row is placed anew.

  The lists live in `shards` (`ListShard`s, or their `RemoteShard`s on other
  machines; default: one here). All share the centroids. The rows placed at
  once (a round's moved rows, or the whole table) are split among the shards
  in block-aligned ranges, as the queries are (`assignment_ranges`), so
  each row is scored against the centroids as in one search of them all
  (faiss's float sums, hence the list of a row near a tie between two
  centroids, depend on the batch it is scored in), and the ranges turn
  among the shards from one placing to the next, so each comes to hold a
  like share. A query so scans the same rows split among the shards as in
  one index, and the shards' best rows merged by score are the one index's:
  the neighbours do not depend on the shards, bar rows tied in float16 at
  the cut (faiss keeps the tied rows it scans first)."""

  def __init__(self, initial_table: np.ndarray, seed: int, nprobe: int = NPROBE,
               shards: Sequence = ()):
    num_rows, _ = initial_table.shape
    nlist = max(1, min(num_rows, int(round(2 * np.sqrt(num_rows)))))
    rng = np.random.default_rng([seed, num_rows])
    centroids = _normalized(initial_table[np.sort(rng.choice(num_rows, nlist,
                                                              replace=False))])
    self.nlist, self.nprobe = nlist, min(nprobe, nlist)
    self.centroids = centroids  # [nlist, D] unit rows: the lists are their cells.
    self._shards = list(shards) or [ListShard()]
    self._generations = [g for (g,) in array_service.call_each(
        [functools.partial(s.configure, centroids, np.int64(self.nprobe))
         for s in self._shards])]
    self._table: Optional[np.ndarray] = None  # The table the lists hold.
    # Rows `moved` are placed by this thread while the next round's clients
    # train; a search waits for them (`_settled`).
    self._mover = concurrent.futures.ThreadPoolExecutor(1, "spreadout-index-moves")
    self._placing: Optional[concurrent.futures.Future] = None
    self._placings = 0  # Turns the ranges among the shards (`_place`).
    _indexes.add(self)

  def _place(self, ids: np.ndarray, rows: np.ndarray, reset: bool) -> Callable[[], list]:
    """A call that has the shards hold the table's `rows` of `ids` (sorted,
    unique; as they are: a shard normalizes them): each shard a range of
    them (the ranges turned by one shard a placing), every shard dropping
    those it held (`ListShard.place`), or holding nothing else (`reset`)."""
    import faiss  # pylint: disable=g-import-not-at-top
    shards = len(self._shards)
    block = faiss.cvar.distance_compute_blas_query_bs
    ranges = assignment_ranges(len(ids), shards, block)
    ranges += [(len(ids), len(ids))] * (shards - len(ranges))  # Empty: drops only.
    turn, self._placings = self._placings % shards, self._placings + 1
    calls = []
    for shard, generation, (start, end) in zip(self._shards, self._generations,
                                               ranges[-turn:] + ranges[:-turn]):
      held = (ids[start:end], rows[start:end])
      calls.append(functools.partial(shard.reset, generation, *held) if reset else
                   functools.partial(shard.place, generation, ids, *held))
    return functools.partial(array_service.call_each, calls)

  def _assigned(self, queries: np.ndarray) -> np.ndarray:
    """[n, nprobe]: the lists each query scans, the queries split among the
    shards (`assignment_ranges`): scoring them against the centroids is done
    once, not by every shard (at Amazon-670K's shape, 39,000 queries took a
    shard of three 1.1 CPU s to assign and 3.0 to scan its lists; one-off)."""
    import faiss  # pylint: disable=g-import-not-at-top
    ranges = assignment_ranges(len(queries), len(self._shards),
                               faiss.cvar.distance_compute_blas_query_bs)
    return np.concatenate([lists for (lists,) in array_service.call_each([
        functools.partial(shard.assign, generation, queries[start:end])
        for shard, generation, (start, end) in zip(self._shards, self._generations,
                                                   ranges)])])

  def _settled(self) -> None:
    """Returns once the last `moved` rows are placed (raises what placing them raised)."""
    placing, self._placing = self._placing, None
    if placing is not None:
      placing.result()

  def moved(self, table: np.ndarray, ids: np.ndarray,
            rows: Optional[np.ndarray] = None) -> None:
    """`table` is the last one the index holds with the rows `ids` changed
    (given `rows`, their new values: then `ids` are sorted and distinct, and
    the table is not read again). They are placed in the background; the
    next search waits for them."""
    self._settled()
    if rows is None:
      ids = row_ids.distinct(ids, len(table))
      rows = np.take(table, ids, axis=0)
    self._placing = self._mover.submit(self._place(ids, rows, reset=False))
    self._table = table

  def nearest(self, before: np.ndarray, table: np.ndarray, changed: np.ndarray,
              class_ids: np.ndarray, k: int) -> np.ndarray:
    """[n, k] ids of (approximately) the k classes nearest to `class_ids`."""
    if self._table is not None and before is self._table:
      self.moved(table, changed)
    else:
      self._settled()
      self._place(np.arange(len(table), dtype=np.int64), table, reset=True)()
      self._table = table
    self._settled()
    queries = _normalized(table[class_ids])
    count = RERANK * (k + 1)
    lists = self._assigned(queries)
    found = array_service.call_each([
        functools.partial(s.search, generation, queries, np.int64(count), lists)
        for s, generation in zip(self._shards, self._generations)])
    scores, candidates, cosines = (np.concatenate(part, axis=1) for part in zip(*found))
    if len(found) > 1:  # The shards' best, merged: the `count` best of all.
      best = np.argsort(-scores, axis=1, kind="stable")[:, :count]
      candidates, cosines = (np.take_along_axis(a, best, 1) for a in (candidates, cosines))
    # Re-ranked by their float32 cosines, empty slots last.
    cosines[candidates < 0] = -np.inf
    reranked = np.take_along_axis(candidates, np.argsort(-cosines, axis=1, kind="stable"), 1)
    return _without_self(reranked, class_ids, k)


class RemoteShard:
  """A `ListShard` served at `address` (`scripts.spreadout_shard`), with its
  methods; errors name `--spreadout_shards`."""

  def __init__(self, address: str, heartbeat_seconds: float = array_service.HEARTBEAT_SECONDS):
    self.remote = array_service.RemoteObject(address, "spreadout index shard",
                                             "spreadout_shards", heartbeat_seconds)
    for method in SERVED:
      setattr(self, method, functools.partial(self.remote.call, method))


_remote_addresses: List[str] = []  # Set by `use_remote_shards`.
_indexes: "weakref.WeakSet[ApproximateNeighbours]" = weakref.WeakSet()


def settle_moves() -> None:
  """Returns once every approximate index has placed the rows it was last told
  moved (in the background): a round's work and traffic, counted whole."""
  for index in list(_indexes):
    index._settled()  # pylint: disable=protected-access


def use_remote_shards(addresses: Sequence[str]) -> None:
  """Approximate indexes built from now on keep their lists on the shards
  served at `addresses` (host:port each, `scripts.spreadout_shard`)."""
  global _remote_addresses
  _remote_addresses = array_service.addresses(addresses, "spreadout_shards")


def remote_shards() -> List[RemoteShard]:
  """A `RemoteShard` per address of `use_remote_shards` ([]: the index is here)."""
  return [RemoteShard(address) for address in _remote_addresses]


def _grown(array: np.ndarray, least: int, fill) -> np.ndarray:
  """`array` with rows of `fill` added, to at least `least` rows and at least
  twice its rows (a row kept costs O(1) copies, amortized)."""
  more = max(least, 2 * len(array)) - len(array)
  return np.concatenate([array, np.full((more,) + array.shape[1:], fill, array.dtype)])


def _cosines(rows: np.ndarray, slot_of: np.ndarray, queries: np.ndarray,
             candidates: np.ndarray) -> np.ndarray:
  """[n, m] float32 cosines of `queries` [n, D] (unit rows) to their
  `candidates` [n, m] (ids; -1: an empty slot, its cosine meaningless), whose
  rows are `rows[slot_of[id]]`. Each is computed alone of the others, so a shard
  scores its candidates as one index scores them. The rows are read
  `RERANK_QUERIES` queries at a time: at 40,000 queries of 22 candidates the
  rows at once are 225 MB of fresh pages (0.14-0.18 s; in parts 0.10 s, the
  same cosines to the bit)."""
  cosines = np.empty(candidates.shape, np.float32)
  for start in range(0, len(candidates), RERANK_QUERIES):
    part = slice(start, start + RERANK_QUERIES)
    found = rows[slot_of[np.maximum(candidates[part], 0)]]
    cosines[part] = np.einsum("nd,nmd->nm", queries[part], found) / np.maximum(
        np.sqrt(np.einsum("nmd,nmd->nm", found, found)), 1e-12)
  return cosines


def recall_against_exact(found: np.ndarray, exact: np.ndarray) -> float:
  """The share of the exact neighbours (rows of `exact`) that `found` holds."""
  return float(np.mean([len(np.intersect1d(f, e)) / len(e) for f, e in zip(found, exact)]))
