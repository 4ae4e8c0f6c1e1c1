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
