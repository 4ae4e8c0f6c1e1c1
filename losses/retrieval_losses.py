"""Retrieval losses over the dual encoder's scores.

Every loss takes `y_true`, the positive item ids [B], and `y_pred`, the scores of
each context against every item of the vocabulary [B, V] (cosine similarities
for a normalized model; column 0, padding, is -1e9), or against a candidate set
[B, K] with `y_true` the positions of the positives in it (`models/scoring.py`,
`candidate_scores`). With `candidates="batch"` a loss instead takes the scores
against the batch's own positives only, [B, B] (column j: example j's item,
`dual_encoder.batch_candidates_model`): all that batch softmax, the hinge and
the cross spreadout read, at B / V of the cost. From those one tensor each
loss picks what it needs, so the same objects serve Keras `fit` and the
federated model (`models/variable_model.py`, as TFF's `from_keras_model`,
whose losses see only y_true and y_pred):
- batch softmax: softmax over the batch's positives, s[i, y_j] / T (in-batch
  negatives; depends on which items share a batch);
- global softmax: softmax over all V items, s[i, :] / T (batch-insensitive);
- hinge: max(0, margin - s[i, y_i])^p on positive pairs only (batch-insensitive;
  needs the spreadout regularizer to avoid collapse). p = 2 by default: the
  squared hinge of the paper's released code (and of FedAwS, paper 000 eq. 23).
The temperature T lives in the softmax losses rather than the model, because
the hinge margin is defined on the raw cosine.
Every loss can add `cross_spreadout_weight * cross_spreadout(s[:, y])`, the
spreadout of the batch's off-diagonal context-positive scores (see
`losses/spreadout.py`); it is a batch-level term, added to each example's loss
so that Keras' mean over the batch adds it once. And every loss can add
`negative_spreadout_weight * negative_spreadout(y, s, negative_margin)`, per
example, the spreadout of the context's scores above the margin against every
item but its positive.
"""

from typing import Any, Dict

import tensorflow as tf

from losses import spreadout


def _labels(y_true: tf.Tensor) -> tf.Tensor:
  return tf.reshape(tf.cast(y_true, tf.int32), [-1])


CANDIDATES = ("vocabulary", "batch")


def _check_positive(value: float, name: str) -> float:
  if not value > 0:
    raise ValueError(f"--{name} must be > 0, got {value}")
  return float(value)


class RetrievalLoss(tf.keras.losses.Loss):
  """A per-example retrieval loss plus the optional cross spreadout of the batch
  and negative spreadout of each example."""

  # Whether the base loss itself reads every item's score (global softmax).
  needs_every_item = False

  def __init__(self, cross_spreadout_weight: float = 0.0,
               spreadout_form: str = "frobenius",
               negative_spreadout_weight: float = 0.0,
               negative_margin: float = spreadout.DEFAULT_NEGATIVE_MARGIN,
               candidates: str = "vocabulary", **kwargs):
    super().__init__(**kwargs)
    for name, weight in (("cross", cross_spreadout_weight),
                         ("negative", negative_spreadout_weight)):
      if weight < 0:
        raise ValueError(f"--{name}_spreadout_weight must be >= 0, got {weight}")
    self.cross_spreadout_weight = float(cross_spreadout_weight)
    self.negative_spreadout_weight = float(negative_spreadout_weight)
    self.negative_margin = float(negative_margin)
    self.spreadout_form = spreadout.check_form(spreadout_form)
    if candidates not in CANDIDATES:
      raise ValueError(f"candidates must be one of {CANDIDATES}, got '{candidates}'")
    if candidates == "batch" and self.reads_every_item:
      raise ValueError(f"{self.name} (negative_spreadout_weight "
                       f"{self.negative_spreadout_weight}) reads every item's score: "
                       "it needs candidates='vocabulary'")
    self.candidates = candidates

  @property
  def reads_every_item(self) -> bool:
    """Whether the loss reads scores beyond the batch's positives, so that it
    cannot train on `candidates="batch"`."""
    return self.needs_every_item or self.negative_spreadout_weight > 0

  def batch_scores(self, labels: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
    """Each context's scores against the batch's positives [B, B]."""
    if self.candidates == "vocabulary":
      return tf.gather(scores, labels, axis=1)
    tf.debugging.assert_equal(tf.shape(scores)[1], tf.size(labels), message=(
        "candidates='batch' takes scores against the batch's positives [B, B]"))
    return scores

  def positive_scores(self, labels: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
    """Each context's score against its own positive [B]."""
    if self.candidates == "vocabulary":
      return tf.gather(scores, labels[:, None], axis=1, batch_dims=1)[:, 0]
    return tf.linalg.diag_part(self.batch_scores(labels, scores))

  def per_example(self, labels: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
    """The loss of each example [B] from its positive ids [B] and scores [B, V]
    (or [B, B] against the batch's positives, `candidates="batch"`)."""
    raise NotImplementedError

  def call(self, y_true: tf.Tensor, y_pred: tf.Tensor) -> tf.Tensor:
    labels = _labels(y_true)
    losses = self.per_example(labels, y_pred)
    if self.cross_spreadout_weight:
      losses += self.cross_spreadout_weight * spreadout.cross_spreadout(
          self.batch_scores(labels, y_pred), self.spreadout_form)
    if self.negative_spreadout_weight:
      losses += self.negative_spreadout_weight * spreadout.negative_spreadout(
          labels, y_pred, self.negative_margin, self.spreadout_form)
    return losses

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(),
            "cross_spreadout_weight": self.cross_spreadout_weight,
            "negative_spreadout_weight": self.negative_spreadout_weight,
            "negative_margin": self.negative_margin,
            "spreadout_form": self.spreadout_form, "candidates": self.candidates}


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class BatchSoftmaxLoss(RetrievalLoss):
  """Softmax cross-entropy against the other positives of the batch."""

  def __init__(self, temperature: float = 0.05,
               remove_accidental_hits: bool = False, name: str = "batch_softmax",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.temperature = _check_positive(temperature, "temperature")
    self.remove_accidental_hits = bool(remove_accidental_hits)

  def per_example(self, labels: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
    logits = self.batch_scores(labels, scores) / self.temperature  # [B, B]
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
class GlobalSoftmaxLoss(RetrievalLoss):
  """Softmax cross-entropy over the whole item vocabulary."""

  needs_every_item = True

  def __init__(self, temperature: float = 0.05, name: str = "global_softmax",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.temperature = _check_positive(temperature, "temperature")

  def per_example(self, labels: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=scores / self.temperature)

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "temperature": self.temperature}


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class HingeLoss(RetrievalLoss):
  """max(0, margin - s(context, positive))^power on positive pairs only."""

  def __init__(self, margin: float = 0.9, power: int = 2, name: str = "hinge",
               **kwargs):
    super().__init__(name=name, **kwargs)
    self.margin = _check_positive(margin, "margin")
    if power not in (1, 2):
      raise ValueError(f"--hinge_power must be 1 or 2, got {power}")
    self.power = int(power)

  def per_example(self, labels: tf.Tensor, scores: tf.Tensor) -> tf.Tensor:
    positive = self.positive_scores(labels, scores)
    return tf.pow(tf.nn.relu(self.margin - positive), float(self.power))

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "margin": self.margin, "power": self.power}
