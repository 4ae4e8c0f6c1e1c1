"""Recall@k and mean rank of retrieval scores: functions and Keras metrics.

Scores are the model's [B, V] output (column 0, padding, never a candidate).
The rank of the true item is the number of *other* candidates scoring at least
as high, so ties never count as hits; recall@k is the share of ranks < k.
- global: candidates are all V - 1 real items of the vocabulary;
- batch: candidates are the distinct positive items of the batch.
The Keras metrics take (y_true, y_pred) only, as the federated model
(`models/variable_model.py`, as TFF's `from_keras_model`) gives them, and are
means (TFF sums their total/count across clients).
"""

from typing import Any, Dict

import tensorflow as tf


def _true_scores(labels: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
  return tf.gather(scores, labels[:, None], axis=1, batch_dims=1)


def global_ranks(labels: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
  """Rank of each true item among all non-padding items [B] (0 = best)."""
  labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
  at_least = scores[:, 1:] >= _true_scores(labels, scores)
  return tf.reduce_sum(tf.cast(at_least, tf.int32), axis=1) - 1


def batch_ranks(labels: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
  """Rank of each true item among the batch's distinct positive items [B]."""
  labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
  candidates, _ = tf.unique(labels)
  at_least = tf.gather(scores, candidates, axis=1) >= _true_scores(labels, scores)
  return tf.reduce_sum(tf.cast(at_least, tf.int32), axis=1) - 1


def grouped_batch_ranks(labels: tf.Tensor, scores: tf.Tensor,
                        group_size: int) -> tf.Tensor:
  """`batch_ranks` of every consecutive group of `group_size` rows at once.

  Equal to calling `batch_ranks` on each group (the last one may be short), but
  one [N, N] comparison instead of N / group_size small calls: evaluation
  scores large chunks and still reports batch recall for batches of the
  training size.
  """
  labels = tf.reshape(tf.cast(labels, tf.int32), [-1])
  n = tf.size(labels)
  group = tf.range(n) // group_size
  same_group = tf.equal(group[:, None], group[None, :])
  same_item = tf.equal(labels[:, None], labels[None, :])
  earlier = tf.range(n)[:, None] < tf.range(n)[None, :]  # [j', j]: j' before j.
  repeated = tf.reduce_any(same_group & same_item & earlier, axis=0)  # [j]
  at_least = tf.gather(scores, labels, axis=1) >= _true_scores(labels, scores)
  counted = at_least & same_group & tf.logical_not(repeated)[None, :]
  return tf.reduce_sum(tf.cast(counted, tf.int32), axis=1) - 1


RANK_FUNCTIONS = {"global": global_ranks, "batch": batch_ranks}


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class RecallAtK(tf.keras.metrics.Mean):
  """Share of examples whose true item ranks among the top k candidates."""

  def __init__(self, k: int, candidates: str = "global", name=None, **kwargs):
    if candidates not in RANK_FUNCTIONS:
      raise ValueError(f"candidates must be one of {sorted(RANK_FUNCTIONS)}")
    if k < 1:
      raise ValueError(f"k must be >= 1, got {k}")
    super().__init__(name=name or f"{candidates}_recall_at_{k}", **kwargs)
    self.k = int(k)
    self.candidates = candidates

  def update_state(self, y_true, y_pred, sample_weight=None):
    ranks = RANK_FUNCTIONS[self.candidates](y_true, y_pred)
    return super().update_state(tf.cast(ranks < self.k, tf.float32), sample_weight)

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "k": self.k, "candidates": self.candidates}


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class MeanRank(tf.keras.metrics.Mean):
  """Mean 1-based rank of the true item (1 = ranked first)."""

  def __init__(self, candidates: str = "global", name=None, **kwargs):
    if candidates not in RANK_FUNCTIONS:
      raise ValueError(f"candidates must be one of {sorted(RANK_FUNCTIONS)}")
    super().__init__(name=name or f"{candidates}_mean_rank", **kwargs)
    self.candidates = candidates

  def update_state(self, y_true, y_pred, sample_weight=None):
    ranks = RANK_FUNCTIONS[self.candidates](y_true, y_pred)
    return super().update_state(tf.cast(ranks + 1, tf.float32), sample_weight)

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "candidates": self.candidates}


def report_name(metric_name: str) -> str:
  """'global_recall_at_10' -> 'global_recall@10' (TF scope names forbid '@')."""
  return metric_name.replace("_recall_at_", "_recall@")


def retrieval_metrics(ks=(1, 5, 10)) -> list:
  """The metric set reported everywhere: global and batch recall@k, global mean rank."""
  return ([RecallAtK(k, "global") for k in ks] +
          [RecallAtK(k, "batch") for k in ks] + [MeanRank("global")])
