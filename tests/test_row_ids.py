"""Distinct row ids by marking the table's rows: NumPy's sorting unique."""

import numpy as np
import pytest

from fed_retrieval.algorithms import row_ids


@pytest.mark.parametrize("count,num_rows", [(0, 5), (1, 1), (50, 7), (10_000, 100_000)])
def test_distinct_rows_and_positions_are_numpys_unique(count, num_rows):
  ids = np.random.default_rng(count).integers(0, num_rows, count).astype(np.int32)
  expected, inverse = np.unique(ids, return_inverse=True)
  found, positions = row_ids.distinct_and_positions(ids, num_rows)
  np.testing.assert_array_equal(found, expected)
  np.testing.assert_array_equal(positions, inverse)
  np.testing.assert_array_equal(row_ids.distinct(ids, num_rows), expected)
  assert found.dtype == np.int64 and positions.dtype == np.int32
  np.testing.assert_array_equal(found[positions], ids)
  rows, lookup = row_ids.distinct_and_lookup(ids, num_rows)
  np.testing.assert_array_equal(rows, expected)
  np.testing.assert_array_equal(lookup[expected], np.arange(len(expected)))


def test_an_id_beyond_the_rows_is_an_error_not_a_wrong_row():
  with pytest.raises(IndexError):
    row_ids.distinct(np.array([0, 5]), 5)


@pytest.mark.parametrize("count,num_rows", [(0, 4), (1, 3), (300, 7), (5_000, 50_000)])
def test_rows_added_in_order_are_a_loops_float_sums_to_the_bit(count, num_rows):
  """Repeated ids (300 into 7 rows: ~43 each) get each of their rows, one
  after another in order, as a loop adding them in float32 does; split into
  parts, the same."""
  rng = np.random.default_rng(count)
  ids = rng.integers(0, num_rows, count)
  rows = rng.normal(size=(count, 3)).astype(np.float32) * 10 ** rng.uniform(-4, 4, (count, 1))
  start = rng.normal(size=(num_rows, 3)).astype(np.float32)
  expected = start.copy()
  for i, row in zip(ids, rows):
    expected[i] = expected[i] + row
  at_once, in_parts = start.copy(), start.copy()
  row_ids.add_in_order(at_once, ids, rows)
  for part in np.array_split(np.arange(count), 3):
    row_ids.add_in_order(in_parts, ids[part], rows[part])
  np.testing.assert_array_equal(at_once, expected)
  np.testing.assert_array_equal(in_parts, expected)
  if count == 300:  # NumPy's fancy += keeps one row a repeated id: not these sums.
    kept_one = start.copy()
    kept_one[ids] += rows
    assert not np.array_equal(kept_one, expected)


@pytest.mark.parametrize("count", [0, 1, row_ids.ADD_BLOCK_ROWS + 7])
def test_distinct_rows_added_whole_are_numpys_fancy_sums_to_the_bit(count):
  """Across blocks (one more than a block's rows, and a few), int32 ids in
  any order: the same bits as `sums[ids] += rows`; rows not named untouched."""
  rng = np.random.default_rng(count)
  num_rows = 2 * count + 3
  ids = rng.permutation(num_rows)[:count].astype(np.int32)
  rows = rng.normal(size=(count, 5)).astype(np.float32) * 10 ** rng.uniform(-4, 4, (count, 1))
  start = rng.normal(size=(num_rows, 5)).astype(np.float32)
  expected, added = start.copy(), start.copy()
  expected[ids] += rows
  row_ids.add_rows(added, ids, rows)
  np.testing.assert_array_equal(added.view(np.int32), expected.view(np.int32))
  untouched = np.setdiff1d(np.arange(num_rows), ids)
  np.testing.assert_array_equal(added[untouched], start[untouched])


@pytest.mark.parametrize("count", [0, 1, 300])
def test_rows_put_whole_are_numpys_fancy_assignment(count):
  """int32 ids in any order, rows given as another array's columns (not
  contiguous): the same table as `table[ids] = rows`."""
  rng = np.random.default_rng(count)
  num_rows = 2 * count + 3
  ids = rng.permutation(num_rows)[:count].astype(np.int32)
  rows = rng.normal(size=(count, 10)).astype(np.float32)[:, ::2]
  start = rng.normal(size=(num_rows, 5)).astype(np.float32)
  expected, put = start.copy(), start.copy()
  expected[ids] = rows
  row_ids.put_rows(put, ids, rows)
  np.testing.assert_array_equal(put.view(np.int32), expected.view(np.int32))
