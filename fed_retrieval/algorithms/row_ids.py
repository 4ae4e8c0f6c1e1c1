"""The distinct rows of a table that a round's ids name, found by marking the
table's rows rather than sorting the ids: O(ids + rows). A 4,000-client round
at Amazon-670K's shape takes this about 30 times (each call's bag rows, the
rows summed, the rows the spreadout moves), 800,000 ids into a 135,910-row bag
in 4 ms against NumPy's sorting `np.unique` 83 ms."""

from typing import Tuple

import numpy as np


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
