"""Retrieval losses over the dual encoder's scores.

Every loss takes `y_true`, the positive item ids [B], and `y_pred`, the scores of
each context against every item of the vocabulary [B, V] (cosine similarities
for a normalized model; column 0, padding, is -1e9). From those one tensor each
loss picks what it needs, so the same objects serve Keras `fit` and TFF's
`from_keras_model` (whose losses see only y_true and y_pred):
- batch softmax: softmax over the batch's positives, s[i, y_j] / T (in-batch
  negatives; depends on which items share a batch);
- global softmax: softmax over all V items, s[i, :] / T (batch-insensitive);
- hinge: max(0, margin - s[i, y_i])^p on positive pairs only (batch-insensitive;
  needs the spreadout regularizer to avoid collapse).
The temperature T lives in the softmax losses rather than the model, because
the hinge margin is defined on the raw cosine.
"""

from typing import Any, Dict

import tensorflow as tf


def _labels(y_true: tf.Tensor) -> tf.Tensor:
  return tf.reshape(tf.cast(y_true, tf.int32), [-1])


def _check_positive(value: float, name: str) -> float:
  if not value > 0:
    raise ValueError(f"--{name} must be > 0, got {value}")
  return float(value)


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class BatchSoftmaxLoss(tf.keras.losses.Loss):
  """Softmax cross-entropy against the other positives of the batch."""

  def __init__(self, temperature: float = 0.05,
               remove_accidental_hits: bool = False, name: str = "batch_softmax",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.temperature = _check_positive(temperature, "temperature")
    self.remove_accidental_hits = bool(remove_accidental_hits)

  def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    labels = _labels(y_true)
    logits = tf.gather(y_pred, labels, axis=1) / self.temperature  # [B, B]
    if self.remove_accidental_hits:
      same_item = tf.equal(labels[:, None], labels[None, :])
      accidental = tf.logical_and(same_item, tf.logical_not(
          tf.eye(tf.size(labels), dtype=tf.bool)))
      logits = tf.where(accidental, tf.constant(-1e9, logits.dtype), logits)
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.range(tf.size(labels)), logits=logits)

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "temperature": self.temperature,
            "remove_accidental_hits": self.remove_accidental_hits}


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class GlobalSoftmaxLoss(tf.keras.losses.Loss):
  """Softmax cross-entropy over the whole item vocabulary."""

  def __init__(self, temperature: float = 0.05, name: str = "global_softmax",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.temperature = _check_positive(temperature, "temperature")

  def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=_labels(y_true), logits=y_pred / self.temperature)

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "temperature": self.temperature}


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class HingeLoss(tf.keras.losses.Loss):
  """max(0, margin - s(context, positive))^power on positive pairs only."""

  def __init__(self, margin: float = 0.9, power: int = 1, name: str = "hinge",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.margin = _check_positive(margin, "margin")
    if power not in (1, 2):
      raise ValueError(f"--hinge_power must be 1 or 2, got {power}")
    self.power = int(power)

  def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    labels = _labels(y_true)
    positive = tf.gather(y_pred, labels[:, None], axis=1, batch_dims=1)[:, 0]
    return tf.pow(tf.nn.relu(self.margin - positive), float(self.power))

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "margin": self.margin, "power": self.power}
