"""Time and memory of FedAwS's server spreadout step on a large class table.

The step (losses/class_spreadout.py) for C' updated classes of a C x D table:
an exact, chunked nearest-class search (C' x C dot products, a block of rows
at a time) and the gradient step on the C' rows and their k neighbours. The
benchmark times the whole step on a random table (after one warm-up call) and
reports the process's peak RSS, against the dense C' x C score matrix the
chunking avoids.
"""

import resource
import time
from typing import Any, Dict

import numpy as np
import tensorflow as tf

from losses import class_spreadout


def _peak_rss_mb() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def spreadout_step_benchmark(num_classes: int, dim: int, num_updated: int, k: int,
                             mode: str = "topk", repeats: int = 3,
                             max_scores_in_memory: int = 2 ** 25,
                             seed: int = 0) -> Dict[str, Any]:
  rng = np.random.default_rng(seed)
  table = tf.constant(rng.normal(size=(num_classes, dim)).astype(np.float32))
  updated = tf.constant(np.sort(rng.choice(num_classes, num_updated, replace=False)),
                        tf.int32)
  step = tf.function(lambda t, ids: class_spreadout.spreadout_step(
      t, ids, 0.1, mode, k, max_scores_in_memory=max_scores_in_memory))
  rss_before = _peak_rss_mb()
  step(table, updated).numpy()  # Warm-up: tracing.
  seconds = []
  for _ in range(repeats):
    start = time.perf_counter()
    step(table, updated).numpy()
    seconds.append(time.perf_counter() - start)
  return {
      "num_classes": num_classes, "dim": dim, "updated_classes": num_updated, "k": k,
      "mode": mode, "seconds_per_step": round(min(seconds), 3),
      "search_gflop": round(2 * num_updated * num_classes * dim / 1e9, 1),
      "peak_rss_mb": round(_peak_rss_mb(), 1),
      "peak_rss_growth_during_step_mb": round(_peak_rss_mb() - rss_before, 1),
      "table_mb": round(num_classes * dim * 4 / 2 ** 20, 1),
      "dense_scores_avoided_mb": round(num_updated * num_classes * 4 / 2 ** 20, 1),
      "chunk_scores_mb": round(max_scores_in_memory * 4 / 2 ** 20, 1),
  }
