"""Offline evaluation of a scoring function over a whole split.

The rank definitions of `recall_metrics` (the same as the Keras metrics used in
training) over a whole split, so offline, in-training and exported-model numbers
agree. Batch recall is among the distinct positives of `batch_size` examples
drawn in a seeded random order (across users), as in a centralized test batch.
"""

from typing import Any, Callable, Dict, Sequence, Tuple

import numpy as np
import tensorflow as tf

from fed_retrieval import top_k_index
from fed_retrieval.evaluation import recall_metrics
from fed_retrieval.evaluation import units
from tasks import client_data
from tasks.movielens.sequence_examples import Examples

ScoreFn = Callable[[tf.Tensor], tf.Tensor]
EVALUATION_SEED = 1234


def _ranks(score_fn: ScoreFn, examples: Examples, batch_size: int,
           batches_per_chunk: int) -> Tuple[np.ndarray, np.ndarray]:
  """(global ranks, batch ranks among groups of `batch_size`) of `examples` in
  their order, scoring `batches_per_chunk` batches at a time."""
  global_ranks, batch_ranks = [], []
  # Eager: a tf.function here was traced anew at every call (0.4 s for a
  # 1,158-example split, four times its scoring).
  for contexts, labels in client_data.centralized_chunks(examples,
                                                         batch_size * batches_per_chunk):
    scores = score_fn(tf.nest.map_structure(tf.constant, contexts))
    global_ranks.append(recall_metrics.global_ranks(labels, scores).numpy())
    batch_ranks.append(recall_metrics.grouped_batch_ranks(labels, scores,
                                                          batch_size).numpy())
  return np.concatenate(global_ranks), np.concatenate(batch_ranks)


def evaluate(score_fn: ScoreFn, examples: Examples, ks: Sequence[int] = (1, 5, 10),
             batch_size: int = 16, seed: int = EVALUATION_SEED,
             batches_per_chunk: int = 64) -> Dict[str, Any]:
  """{'global_recall@k', 'batch_recall@k', 'global_mean_rank'} over `examples`,
  and (`units.UNITS`) global recall@max(k) per user.

  Scores `batches_per_chunk` batches at a time; batch recall is still computed
  per batch of `batch_size` (see `recall_metrics.grouped_batch_ranks`).
  """
  if not len(examples):
    raise ValueError("Cannot evaluate on an empty split")
  # A NumPy permutation, not tf.data's shuffle: the order must not depend on
  # TensorFlow's global seed, so every caller sees the same batches.
  order = np.random.default_rng(seed).permutation(len(examples))
  shuffled = examples.take(order)
  global_ranks, batch_ranks = _ranks(score_fn, shuffled, batch_size,
                                     batches_per_chunk)
  results = {}
  for k in ks:
    results[f"global_recall@{k}"] = float(np.mean(global_ranks < k))
  for k in ks:
    results[f"batch_recall@{k}"] = float(np.mean(batch_ranks < k))
  results["global_mean_rank"] = float(np.mean(global_ranks + 1))
  results[units.UNITS] = units.per_group(global_ranks < max(ks), shuffled.user_ids)
  return results


def index_recall(query_tower: tf.keras.Model, index: top_k_index.TopKIndex,
                 exact: top_k_index.TopKIndex, examples: Examples,
                 ks: Sequence[int] = (1, 5, 10), chunk_size: int = 1024
                 ) -> Dict[str, float]:
  """Of a top-k index over the item rows 1.. against `exact` (brute force over
  the same rows), over `examples`: 'index_global_recall@k' (the true item among
  the index's top k) and 'index_recall@k' (the share of the exact top k that the
  index returns)."""
  if not len(examples):
    raise ValueError("Cannot evaluate on an empty split")
  k_max = max(ks)
  found, expected = [], []
  for start in range(0, len(examples), chunk_size):
    queries = query_tower(examples.contexts[start:start + chunk_size]).numpy()
    found.append(index.search(queries, k_max)[1])
    expected.append(exact.search(queries, k_max)[1])
  found, expected = np.concatenate(found), np.concatenate(expected)
  labels = examples.labels.reshape(-1, 1).astype(np.int64) - 1  # Index rows.
  results = {}
  for k in ks:
    results[f"index_global_recall@{k}"] = float(np.mean(
        np.any(found[:, :k] == labels, axis=1)))
  for k in ks:
    results[f"index_recall@{k}"] = top_k_index.overlap_recall(found[:, :k],
                                                              expected[:, :k])
  return results


def example_global_ranks(score_fn: ScoreFn, examples: Examples,
                         chunk_size: int = 1024) -> np.ndarray:
  """The global rank of every example's item [N], in the examples' order (so
  they line up with `examples.user_ids`)."""
  if not len(examples):
    raise ValueError("Cannot evaluate on an empty split")
  return _ranks(score_fn, examples, chunk_size, 1)[0]


def popularity_score_fn(train_examples: Examples, vocabulary_size: int) -> ScoreFn:
  """The most-popular baseline: every context scores items by training frequency."""
  counts = np.bincount(train_examples.labels, minlength=vocabulary_size).astype(np.float32)
  counts[0] = -1e9
  counts = tf.constant(counts)
  return lambda contexts: tf.tile(counts[None, :], [tf.shape(contexts)[0], 1])


def most_popular_baseline(train_examples: Examples, test_examples: Examples,
                          vocabulary_size: int, ks: Sequence[int],
                          batch_size: int) -> Dict[str, Dict[str, float]]:
  """The trivial baseline every MovieLens results.json carries: the training
  examples' most popular items recommended to every test context."""
  return {"most_popular_baseline": units.with_standard_error(evaluate(
      popularity_score_fn(train_examples, vocabulary_size), test_examples, ks,
      batch_size), f"global_recall@{max(ks)}")}
