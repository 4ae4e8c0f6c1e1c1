"""Build time, memory, queries/s and recall of the top-k indexes on a catalog.

The catalog is synthetic and says so: `rows / 100` Gaussian clusters (the
centres N(0, I), each row its centre plus noise as wide as the centres'
spread), rows and queries scaled to unit length, as the XC class tables and
the dual encoder's normalized towers are. Queries are a fresh draw of the same
mixture: 1,000 calibrate the approximate index's nprobe and 1,000 others
measure recall@k against brute force. Structure matters: on an isotropic
Gaussian table (no clusters) no inverted file reaches a high recall without
scanning most lists, and the calibrated nprobe grows to do so.
"""

import time
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import psutil

from fed_retrieval import top_k_index

MB = 2 ** 20


def synthetic_catalog(rows: int, dim: int, seed: int = 0,
                      clusters: Optional[int] = None) -> np.ndarray:
  """`rows` unit rows of a mixture of `clusters` (default `rows / 100`)
  Gaussian clusters (module docstring); the centres depend on `clusters` and
  `dim` only, so queries drawn with the table's `clusters` share its centres."""
  centres = np.random.default_rng(1_000_003).standard_normal(
      [clusters or max(1, rows // 100), dim]).astype(np.float32)
  rng = np.random.default_rng(seed)
  table = centres[rng.integers(0, len(centres), rows)]
  table += rng.standard_normal([rows, dim], dtype=np.float32)
  table /= np.linalg.norm(table, axis=1, keepdims=True)
  return table


def queries_per_second(index: top_k_index.TopKIndex, queries: np.ndarray, batch: int,
                       k: int, min_seconds: float = 2.0) -> float:
  """Queries answered per second in batches of `batch` (at least `min_seconds`
  of searching, at least one batch, after one warm-up batch)."""
  index.search(queries[:batch], k)
  answered, start, elapsed, offset = 0, time.perf_counter(), 0.0, 0
  while elapsed < min_seconds:
    if offset + batch > len(queries):
      offset = 0
    index.search(queries[offset:offset + batch], k)
    answered += batch
    offset += batch
    elapsed = time.perf_counter() - start
  return answered / elapsed


def _rss_mb() -> float:
  return psutil.Process().memory_info().rss / MB


def catalog_benchmark(rows: int, dim: int, k: int = 10, batches: Sequence[int] = (1, 256),
                      target_recall: float = top_k_index.TARGET_RECALL,
                      queries: int = 1000, seed: int = 0, min_seconds: float = 2.0
                      ) -> List[Dict[str, Any]]:
  """One row per index kind on a catalog of `rows` x `dim`."""
  table = synthetic_catalog(rows, dim, seed)
  clusters = max(1, rows // 100)
  calibration = synthetic_catalog(queries, dim, seed + 1, clusters)
  held_out = synthetic_catalog(max(queries, max(batches)), dim, seed + 2, clusters)
  exact = top_k_index.BruteForceIndex(table)
  exact_rows = exact.search(held_out[:queries], k)[1]
  table_mb = table.nbytes / MB
  results = []
  for kind in top_k_index.KINDS:
    rss_before, start = _rss_mb(), time.perf_counter()
    index = (exact if kind == "brute_force" else top_k_index.ApproximateIndex.build(
        table, calibration, k=k, target_recall=target_recall, seed=seed))
    build_seconds = time.perf_counter() - start
    index_mb = (table_mb if kind == "brute_force" else index.memory_bytes / MB)
    row = {"rows": rows, "dim": dim, "index": kind,
           "build_seconds": build_seconds,
           "index_mb": index_mb, "index_over_table": index_mb / table_mb,
           "rss_growth_mb": _rss_mb() - rss_before,
           f"recall@{k}": top_k_index.overlap_recall(
               index.search(held_out[:queries], k)[1], exact_rows),
           "params": dict(index.info.params),
           "calibration_recall": index.info.recall.get(f"recall@{k}")}
    for batch in batches:
      row[f"queries_per_second_batch_{batch}"] = queries_per_second(
          index, held_out, batch, k, min_seconds)
    results.append(row)
  brute, approximate = results
  for batch in batches:
    key = f"queries_per_second_batch_{batch}"
    approximate[f"speedup_batch_{batch}"] = approximate[key] / brute[key]
  return results


def results_table(results: Sequence[Dict[str, Any]], k: int = 10,
                  batches: Sequence[int] = (1, 256)) -> str:
  """The benchmark's rows as a markdown table."""
  header = (["rows", "dim", "index", "build s", "index MB", "/ table",
             f"recall@{k}", "nlist / nprobe / k_factor"] +
            [f"q/s batch {b}" for b in batches] + [f"speedup batch {b}" for b in batches])
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for row in results:
    params = row["params"]
    cells = [f"{row['rows']:,}", str(row["dim"]), row["index"],
             f"{row['build_seconds']:.1f}", f"{row['index_mb']:.0f}",
             f"{row['index_over_table']:.3f}", f"{row[f'recall@{k}']:.4f}",
             f"{params['nlist']} / {params['nprobe']} / {params['k_factor']}"
             if params else "-"]
    cells += [f"{row[f'queries_per_second_batch_{b}']:.4g}" for b in batches]
    cells += [f"{row[f'speedup_batch_{b}']:.1f}x" if f"speedup_batch_{b}" in row else "-"
              for b in batches]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"
