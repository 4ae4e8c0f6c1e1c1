"""The distinct rows of a table that a round's ids name, found by marking the
table's rows rather than sorting the ids: O(ids + rows). A 4,000-client round
at Amazon-670K's shape takes this about 30 times (each call's bag rows, the
rows summed, the rows the spreadout moves), 800,000 ids into a 135,910-row bag
in 4 ms against NumPy's sorting `np.unique` 83 ms."""

from typing import Tuple

import numpy as np

# Rows `add_rows` moves at once: 1 MB of rows of 64 floats, which stays in a
# core's cache between the gather, the add and the put.
ADD_BLOCK_ROWS = 4096


def distinct(ids: np.ndarray, num_rows: int) -> np.ndarray:
  """The sorted distinct values (int64) of `ids`, each in [0, num_rows)."""
  marked = np.zeros(num_rows, bool)
  marked[ids] = True
  return np.flatnonzero(marked)


def distinct_and_lookup(ids: np.ndarray, num_rows: int
                        ) -> Tuple[np.ndarray, np.ndarray]:
  """`distinct(ids, num_rows)` and, for each of the `num_rows` rows, its
  position among them (int32; meaningless for rows not among them)."""
  marked = np.zeros(num_rows, bool)
  marked[ids] = True
  return np.flatnonzero(marked), np.cumsum(marked, dtype=np.int32) - 1


def distinct_and_positions(ids: np.ndarray, num_rows: int
                           ) -> Tuple[np.ndarray, np.ndarray]:
  """`distinct(ids, num_rows)` and each id's position among them (int32):
  `np.unique(ids, return_inverse=True)`."""
  rows, lookup = distinct_and_lookup(ids, num_rows)
  return rows, lookup[ids]


def _whole_rows(table: np.ndarray) -> np.ndarray:
  """[n] view of the C-contiguous `table` [n, D], each row one opaque item."""
  row = np.dtype((np.void, table.shape[1] * table.itemsize))
  return table.view(row).reshape(len(table))


def put_rows(table: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> None:
  """table[ids] = rows for C-contiguous `table`, each row moved whole (NumPy's
  fancy assignment moves a row's elements one by one: 318,000 rows of 64
  floats took 20 ms against 14)."""
  np.put(_whole_rows(table), ids, _whole_rows(np.ascontiguousarray(rows, table.dtype)))


def add_rows(sums: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> None:
  """sums[ids] += rows for distinct `ids` [n] into C-contiguous `sums`, in
  place: NumPy's fancy `+=` (the same float sums) moves a row's elements one
  by one; here each row is gathered and put back whole (as one item of
  `sums`' rows viewed as opaque bytes), `ADD_BLOCK_ROWS` at a time. At
  Amazon-670K's shape, 16 shards' sums of 116,000 distinct rows each took
  0.17 CPU s to add against 0.43-0.48 (one-off, thread clocks)."""
  whole = _whole_rows(sums)
  for start in range(0, len(ids), ADD_BLOCK_ROWS):
    block = ids[start:start + ADD_BLOCK_ROWS]
    gathered = np.take(whole, block)
    values = gathered.view(sums.dtype).reshape(len(block), sums.shape[1])
    np.add(values, rows[start:start + ADD_BLOCK_ROWS], out=values)
    np.put(whole, block, gathered)


def add_in_order(sums: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> None:
  """sums[i] += row for each id i of `ids` [n] and row of `rows` [n, D], in
  place and in their order, a repeated id's rows one after another (NumPy's
  `sums[ids] += rows` keeps one row of a repeated id): each sum is the float
  sum one segment sum over the rows would give, however they were split into
  calls. The ids seen once are added in one step, the repeats a level at a
  time (the k-th row of each id in level k)."""
  once = np.bincount(ids, minlength=len(sums))[ids] == 1
  if once.all():  # Distinct ids (a shard's or call's sums): no copies.
    add_rows(sums, ids, rows)
    return
  add_rows(sums, ids[once], rows[once])
  repeated = np.flatnonzero(~once)
  ids, rows = ids[repeated], rows[repeated]
  by_id = np.argsort(ids, kind="stable")
  sorted_ids = ids[by_id]
  starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
  level = np.empty(len(ids), np.int64)  # Each row's place among its id's rows.
  level[by_id] = np.arange(len(ids)) - np.repeat(starts, np.diff(np.r_[starts, len(ids)]))
  by_level = np.argsort(level, kind="stable")
  bounds = np.cumsum(np.bincount(level))
  for start, end in zip(np.r_[0, bounds[:-1]], bounds):
    at = by_level[start:end]
    add_rows(sums, ids[at], rows[at])
