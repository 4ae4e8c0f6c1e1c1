"""Spreadout regularizer: pushes the item embeddings of unrelated items apart.

Formula (the dual-encoder variant: a Frobenius norm of the off-diagonal
similarities). With E the n x d item-embedding table without the padding row,
rows L2-normalized when `normalize` (cosine similarities):

    spreadout(E) = sum_{i != j} (e_i . e_j)^2 / (n (n - 1))
                 = (||E^T E||_F^2 - sum_i ||e_i||^4) / (n (n - 1)),

the mean squared similarity over all ordered pairs of distinct items. The second
form costs O(n d^2) instead of O(n^2 d): the full 3,952-item table costs about
one 16 x 16 Gram matrix per step. For unit rows its minimum is about
(n / d - 1) / (n - 1) ~ 1/d (the rows form a tight frame), and random unit
vectors give ~1/d as well, so it keeps embeddings from collapsing onto a few
directions (what a positives-only hinge loss does without it). The regularizer
adds `weight * spreadout(E)` to the loss.
"""

from typing import Any, Dict

import tensorflow as tf


def spreadout(embeddings: tf.Tensor, normalize: bool = True,
              exclude_first_row: bool = True) -> tf.Tensor:
  """Mean squared off-diagonal similarity of the rows of `embeddings`."""
  if exclude_first_row:
    embeddings = embeddings[1:]
  if normalize:
    embeddings = tf.math.l2_normalize(embeddings, axis=1)
  n = tf.cast(tf.shape(embeddings)[0], embeddings.dtype)
  gram = tf.matmul(embeddings, embeddings, transpose_a=True)
  all_pairs = tf.reduce_sum(tf.square(gram))
  self_pairs = tf.reduce_sum(tf.square(tf.reduce_sum(tf.square(embeddings), axis=1)))
  return (all_pairs - self_pairs) / (n * (n - 1.0))


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class SpreadoutRegularizer(tf.keras.regularizers.Regularizer):
  """`weight * spreadout(table)` as a Keras embeddings regularizer."""

  def __init__(self, weight: float = 1.0, normalize: bool = True,
               exclude_first_row: bool = True):
    if weight < 0:
      raise ValueError(f"--spreadout_weight must be >= 0, got {weight}")
    self.weight = float(weight)
    self.normalize = bool(normalize)
    self.exclude_first_row = bool(exclude_first_row)

  def __call__(self, embeddings: tf.Tensor) -> tf.Tensor:
    return self.weight * spreadout(embeddings, self.normalize,
                                   self.exclude_first_row)

  def get_config(self) -> Dict[str, Any]:
    return {"weight": self.weight, "normalize": self.normalize,
            "exclude_first_row": self.exclude_first_row}
