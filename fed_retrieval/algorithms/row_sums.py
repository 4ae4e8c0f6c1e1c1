"""A round's row deltas summed per row as the calls' uploads arrive
(`RowSums`), in NumPy alone: the sub-model process's driver folds them
(`sub_model`), or a table server folds those of its rows
(`served_table`)."""

from typing import List, NamedTuple, Sequence

import numpy as np

from fed_retrieval.algorithms import row_ids

# Rows `RowSums.add_means` reads at once: 16 MB of rows of 64 floats.
BLOCK_ROWS = 65_536


class RowParts(NamedTuple):
  """Uploads for `RowSums.add` (the class rows' or the bag's): per part (a
  client, a shard's class rows or a call's bag) its row keys, their deltas
  summed over its clients (with the `clients` mean, each client's scaled by
  its weight), how many of its clients held each key (a call's bag: not
  counted, its mean is over every client), and its clients' weights (or
  their total). `dense`: one part whose sums (and holders) cover every row
  of the table, zeros outside its keys (a shard or call that reads most of
  it), added in one pass, not gathered and scattered by key."""
  keys: List[np.ndarray]
  sums: List[np.ndarray]
  holders: List[np.ndarray]
  weights: List[float]
  dense: bool = False


class RowSums:
  """A round's row deltas summed per row, in place on arrays of the table's
  shape kept across rounds, as the calls' uploads arrive: `add` folds in
  parts (`RowParts`, whose keys may repeat), O(rows
  uploaded), or a dense part in one pass over the table (a sharded call's
  bag when it reads most of it: at Amazon-670K's shape, 8 calls each of 95%
  of its rows took 135 ms to add by key, 27 ms dense; one-off); `add_means`
  adds each held row's mean delta to its row of a table, `mean` gives the
  dense mean over every client (the bag's: zeros on rows nobody read);
  `clear` zeros what was summed, for the next round.

  `holders`: each row's deltas averaged over the clients that held it;
  `clients`: the example-weighted sum over every client divided by the
  round's total weight (a non-holder counting as a zero delta).

  A row's deltas are added one after another in the order they arrive
  (`row_ids.add_in_order`), so the same uploads give the same sums to the
  bit however they are split into parts and calls. Dense, because a round of
  thousands touches most of a large table: FedSS at Amazon-670K's shape,
  4,000 clients of 510 rows, holds 2M rows a round, 638,000 of them distinct.
  Sums kept over the rows held so far, copied anew with each call's, took
  0.93-1.25 CPU s a round to add (the bag's 0.07 more) against 0.60-0.64 for
  both here, and the driver 3.2-3.7 CPU s a round against 2.0-2.1 (one
  worker; thread clocks, old and new alternated; one-off)."""

  def __init__(self, num_rows: int, dim: int, row_mean: str):
    self._row_mean = row_mean
    self._sums = np.zeros((num_rows, dim), np.float32)
    self._holders = np.zeros(num_rows, np.int64)
    self._held = np.zeros(num_rows, bool)
    self._weights: List[float] = []

  def add(self, parts: RowParts) -> None:
    """Uploads folded in: parts' keys, summed deltas (`clients`: scaled by
    weight), how many clients held each key (none: not counted, as a call's
    bag's), and their clients' weights."""
    if not parts.keys:
      return
    if parts.dense:  # Zeros add nothing: a sum is never -0.0 (it starts at +0.0).
      self._sums += parts.sums[0]
      if parts.holders:
        self._holders += parts.holders[0]
        self._held |= parts.holders[0] > 0
      else:
        self._held[parts.keys[0]] = True
      self._weights.extend(parts.weights)
      return
    # The parts in one step, one pass over the table's rows for
    # `add_in_order`'s counts: a call of 500 clients, a part each, at 670k
    # rows took 40 ms part by part against 1.4 (one-off, thread clocks).
    keys = _joined(parts.keys)
    row_ids.add_in_order(self._sums, keys, _joined(parts.sums))
    if parts.holders:  # Rows a part read that none of its clients held: not held.
      # Of the counts' dtype: `np.add.at` casting int32 took 0.16 CPU s a
      # round, not 0.01 (16 shards at Amazon-670K's shape; one-off).
      holders = _joined(parts.holders).astype(self._holders.dtype, copy=False)
      np.add.at(self._holders, keys, holders)
      keys = keys[holders > 0]
    self._held[keys] = True
    self._weights.extend(parts.weights)

  def _total_weight(self) -> float:
    return max(float(np.sum(self._weights)), 1e-12)

  def add_means(self, table: np.ndarray, rate: float) -> np.ndarray:
    """Adds `rate` times each held row's mean delta to its row of `table`,
    in place, `BLOCK_ROWS` rows at a time, and returns the rows held (sorted,
    int32). Means in float32, the bits of the float64 quotient rounded (a
    float64 has more than twice a float32's digits). In blocks because
    arrays of every row held were fresh memory in a round that had just
    handed its calls' buffers back, each page faulted in: FedSS at
    Amazon-670K's shape, 4,000 clients, 638,000 rows held, took 0.9 CPU s a
    round to compute their means and read their rows of the table (one-off,
    by thread clocks)."""
    ids = np.flatnonzero(self._held)
    total = np.float32(self._total_weight())
    for start in range(0, len(ids), BLOCK_ROWS):
      block = ids[start:start + BLOCK_ROWS]
      divisor = (total if self._row_mean == "clients"
                 else self._holders[block][:, None].astype(np.float32))
      table[block] += rate * (self._sums[block] / divisor)
    return ids.astype(np.int32)

  def mean(self) -> np.ndarray:
    """[rows, D]: the sums over the round's total weight."""
    return self._sums / np.float32(self._total_weight())

  def clear(self) -> None:
    """Zeros the rows summed since the last clear (O(rows held))."""
    ids = np.flatnonzero(self._held)
    self._sums[ids] = 0.0
    self._holders[ids] = 0
    self._held[ids] = False
    self._weights = []


def _joined(arrays: Sequence[np.ndarray]) -> np.ndarray:
  """`arrays` end to end (one alone as it is, not copied)."""
  return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
