"""Offline evaluation of a scoring function over a whole split.

The same Keras metric objects as in training (`recall_metrics`) are updated
batch by batch, so offline, in-training and exported-model numbers agree. Batch
recall is among the distinct positives of `batch_size` examples drawn in a
seeded random order (across users), as in a centralized test batch.
"""

from typing import Callable, Dict, Sequence

import numpy as np
import tensorflow as tf

from fed_retrieval import recall_metrics
from tasks import client_data
from tasks.sequence_examples import Examples

ScoreFn = Callable[[tf.Tensor], tf.Tensor]
EVALUATION_SEED = 1234


def evaluate(score_fn: ScoreFn, examples: Examples, ks: Sequence[int] = (1, 5, 10),
             batch_size: int = 16, seed: int = EVALUATION_SEED) -> Dict[str, float]:
  """{'global_recall@k', 'batch_recall@k', 'global_mean_rank'} over `examples`."""
  if not len(examples):
    raise ValueError("Cannot evaluate on an empty split")
  metrics = recall_metrics.retrieval_metrics(ks)
  # A NumPy permutation, not tf.data's shuffle: the order must not depend on
  # TensorFlow's global seed, so every caller sees the same batches.
  order = np.random.default_rng(seed).permutation(len(examples))
  dataset = client_data.centralized_dataset(examples.take(order), batch_size)

  @tf.function
  def update(contexts, labels):
    scores = score_fn(contexts)
    for metric in metrics:
      metric.update_state(labels, scores)

  for contexts, labels in dataset:
    update(contexts, labels)
  return {metric.name: float(metric.result().numpy()) for metric in metrics}


def popularity_score_fn(train_examples: Examples, vocabulary_size: int) -> ScoreFn:
  """The most-popular baseline: every context scores items by training frequency."""
  counts = np.bincount(train_examples.labels, minlength=vocabulary_size).astype(np.float32)
  counts[0] = -1e9
  counts = tf.constant(counts)
  return lambda contexts: tf.tile(counts[None, :], [tf.shape(contexts)[0], 1])
