"""Softmax cross-entropy against every label of a point at once.

A point with labels L has the soft target 1/|L| on each of them:
loss = -(1/|L|) sum_{l in L} log softmax(logits)_l. One example a point, so a
pass over data with many labels a point costs a pass over its points (the
pairs (point, label) would cost |L| times as many examples for the same
expected gradient up to each point's weight). Labels come padded: an int
[B, max labels] array, `PAD` where a point has fewer.
"""

from typing import Any, Dict

import numpy as np
import tensorflow as tf

PAD = -1


def padded_label_sets(label_sets) -> np.ndarray:
  """[N, max labels] int32 label ids, `PAD`-padded: the loss's y_true."""
  width = max((len(s) for s in label_sets), default=1) or 1
  padded = np.full((len(label_sets), width), PAD, np.int32)
  for row, labels in enumerate(label_sets):
    padded[row, :len(labels)] = labels
  return padded


class SoftTargetCrossentropy(tf.keras.losses.Loss):
  """Cross-entropy of logits [B, C] against padded label sets [B, L]."""

  def __init__(self, name: str = "soft_target_crossentropy", **kwargs):
    super().__init__(name=name, **kwargs)

  def call(self, y_true, y_pred):
    labels = tf.cast(y_true, tf.int32)
    real = tf.cast(labels != PAD, y_pred.dtype)
    log_probabilities = tf.nn.log_softmax(y_pred, axis=-1)
    picked = tf.gather(log_probabilities, tf.maximum(labels, 0), batch_dims=1)
    return -tf.reduce_sum(picked * real, axis=-1) / tf.maximum(
        tf.reduce_sum(real, axis=-1), 1.0)

  def get_config(self) -> Dict[str, Any]:
    return super().get_config()
