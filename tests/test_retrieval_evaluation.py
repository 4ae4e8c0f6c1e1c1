"""Whole-split evaluation: recall from ranks in the examples' order."""

import numpy as np
import tensorflow as tf

from fed_retrieval.evaluation import recall_metrics
from fed_retrieval.evaluation import retrieval_evaluation
from tasks.movielens.sequence_examples import Examples


def case(num_examples=300, vocabulary=40, seed=0):
  rng = np.random.default_rng(seed)
  table = rng.normal(size=(vocabulary, vocabulary)).astype(np.float32)
  table[:, 0] = -1e9  # Padding.
  contexts = rng.integers(1, vocabulary, size=(num_examples, 3)).astype(np.int32)
  examples = Examples(np.sort(rng.integers(0, 7, num_examples)), contexts,
                      rng.integers(1, vocabulary, num_examples).astype(np.int32))
  score_fn = lambda c: tf.gather(tf.constant(table), c[:, 0])  # The first context item's row.
  return examples, score_fn, table


def test_example_global_ranks_are_in_the_examples_order():
  examples, score_fn, table = case()
  ranks = retrieval_evaluation.example_global_ranks(score_fn, examples, chunk_size=64)
  expected = recall_metrics.global_ranks(examples.labels,
                                         table[examples.contexts[:, 0]]).numpy()
  np.testing.assert_array_equal(ranks, expected)


def test_evaluate_agrees_with_the_ranks():
  examples, score_fn, _ = case(seed=1)
  ranks = retrieval_evaluation.example_global_ranks(score_fn, examples)
  results = retrieval_evaluation.evaluate(score_fn, examples, ks=(1, 5), batch_size=16,
                                          batches_per_chunk=4)
  assert results["global_recall@5"] == np.mean(ranks < 5)
  assert results["global_recall@1"] == np.mean(ranks < 1)
  assert results["global_mean_rank"] == np.mean(ranks + 1)
