"""The serving benchmark's catalog and figures on a small catalog."""

import numpy as np
import pytest

from fed_retrieval.reports import serving_benchmark


def test_the_catalog_is_unit_rows_of_clusters():
  table = serving_benchmark.synthetic_catalog(3000, 8)
  np.testing.assert_allclose(np.linalg.norm(table, axis=1), 1.0, rtol=1e-5)
  # Rows of one cluster share a centre: a row's nearest other row is much
  # closer than a random pair's mean cosine (0 for isotropic rows).
  cosines = table[:200] @ table.T
  np.fill_diagonal(cosines[:, :200], -1)
  assert np.mean(np.max(cosines, axis=1)) > 0.9 and abs(np.mean(cosines)) < 0.2
  np.testing.assert_array_equal(table, serving_benchmark.synthetic_catalog(3000, 8))


def test_the_benchmark_reports_both_indexes_against_brute_force():
  brute, approximate = serving_benchmark.catalog_benchmark(
      5000, 16, k=10, batches=(1, 32), target_recall=0.9, queries=200,
      min_seconds=0.05)
  assert (brute["index"], approximate["index"]) == ("brute_force", "approximate")
  assert brute["recall@10"] == 1.0 and brute["index_over_table"] == 1.0
  assert approximate["calibration_recall"] >= 0.9
  assert approximate["recall@10"] >= 0.8  # Held-out queries of the same mixture.
  assert 1.0 < approximate["index_over_table"] < 1.5
  for batch in (1, 32):
    key = f"queries_per_second_batch_{batch}"
    assert brute[key] > 0 and approximate[f"speedup_batch_{batch}"] == pytest.approx(
        approximate[key] / brute[key])
  table = serving_benchmark.results_table([brute, approximate], 10, (1, 32))
  assert table.count("\n") == 4 and "| 5,000 | 16 | approximate |" in table
