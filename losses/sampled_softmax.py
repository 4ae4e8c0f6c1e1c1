"""Softmax cross-entropy over a client's candidate set (paper 003, FedSS).

A client holds K rows of the class table: its positives P_k (the classes of
its own data, padded to a fixed count) and negatives N_k sampled uniformly
from the other classes. For an example with label y, the logits are scaled
cosines s_c = scale * cos(g(x), w_c) over the candidates the objective allows:
- `sampled_softmax` (FedSS, eq. 5): P_k U N_k. Optional logQ correction
  (Bengio & Senecal, eq. 3-4): subtract log q_c from each logit, q_c the chance
  that c is in the key set: 1 for positives, |N_k| / (C - |P_k|) for negatives,
  so the sampled sum estimates the full softmax's denominator.
- `neg_only` (eq. 7): {y} U N_k (the client's other positives are left out).
- `pos_only` (eq. 8): P_k.
- `full_softmax` (eq. 2): every class (the key set is the whole table).
Padding keys (repeated positives) never count as candidates, so a class is in
the denominator once.
"""

from typing import Optional

import tensorflow as tf

CANDIDATE_SETS = ("sampled_softmax", "neg_only", "pos_only", "full_softmax")
MASKED_LOGIT = -1e9


def candidate_mask(label_positions: tf.Tensor, is_positive: tf.Tensor,
                   is_negative: tf.Tensor, candidate_set: str) -> tf.Tensor:
  """[B, K] booleans: which keys are candidates (logits) for each example.

  `is_positive` / `is_negative` [K] mark the real positive and negative keys.
  """
  if candidate_set not in CANDIDATE_SETS:
    raise ValueError(f"candidate set must be one of {', '.join(CANDIDATE_SETS)}, "
                     f"got '{candidate_set}'")
  num_keys = tf.shape(is_positive)[0]
  own = tf.one_hot(label_positions, num_keys, on_value=True, off_value=False,
                   dtype=tf.bool)
  batch = tf.shape(label_positions)[0]
  if candidate_set == "neg_only":
    return own | tf.broadcast_to(is_negative[None, :], [batch, num_keys])
  if candidate_set == "pos_only":
    return tf.broadcast_to(is_positive[None, :], [batch, num_keys])
  return tf.broadcast_to((is_positive | is_negative)[None, :], [batch, num_keys])


def log_q_correction(is_negative: tf.Tensor, num_negatives: int, num_classes: int,
                     num_positives: tf.Tensor) -> tf.Tensor:
  """[K] log q_c: 0 for positives, log(|N| / (C - |P|)) for sampled negatives."""
  others = tf.cast(num_classes, tf.float32) - tf.cast(num_positives, tf.float32)
  log_q = tf.math.log(tf.cast(num_negatives, tf.float32) / tf.maximum(others, 1.0))
  return tf.where(is_negative, log_q, 0.0)


def candidate_softmax_loss(logits: tf.Tensor, label_positions: tf.Tensor,
                           mask: tf.Tensor,
                           log_q: Optional[tf.Tensor] = None) -> tf.Tensor:
  """Mean cross-entropy of the label's position among the allowed logits [B, K]."""
  if log_q is not None:
    logits = logits - log_q[None, :]
  logits = tf.where(mask, logits, MASKED_LOGIT)
  return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=label_positions, logits=logits))
