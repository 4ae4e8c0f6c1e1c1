"""Spreadout: pushes the embeddings of unrelated items (or contexts) apart.

Paper 004's hinge + spreadout (H+S) regularizes with the spreadout of Zhang et
al. (2017); the paper's text lost the formula, and its released code
(google-research/federated, dual_encoder) computes, for a set of embeddings E
(rows L2-normalized, so s_ij are cosines),

    frobenius(E) = sqrt(sum_{i != j} s_ij^2) = ||E E^T - diag(E E^T)||_F,

the Frobenius norm of the off-diagonal similarities. That is the default form.
Its push on each embedding does not shrink with the number of rows n while
the table is (partly) collapsed, which is where the hinge loss drives it: with
similarities ~c, dS/de_i ~ n c and sqrt(S) ~ n c, so the gradient of sqrt(S)
is O(1) per row.
The alternative form `mean`,

    mean(E) = sum_{i != j} s_ij^2 / (n (n - 1)),

the mean squared cosine over ordered pairs, pushes each row with ~1/n of that
strength (tests/test_losses.py checks both scalings): at n = 3,952 items the
same weight pushes thousands of times harder in `frobenius`.

Both are computed from S = ||E^T E||_F^2 - sum_i ||e_i||^4 in O(n d^2) rather
than O(n^2 d): the full 3,952-item table costs one 16 x 16 Gram matrix.

Where spreadout applies (each with its own weight, see `SpreadoutWeights`):
- `item`: the item-embedding table without the padding row (the paper's H+S;
  the released code's `spreadout_lambda` on the shared embedding layer);
- `context`: the batch's context (query) embeddings;
- `cross`: the off-diagonal similarities between the batch's contexts and the
  batch's positive items, s(x_i, y_j) for i != j (in-batch negatives as a
  regularizer rather than a softmax);
- `negative`: each context's scores against every item but its positive
  that exceed `negative_margin`, max(0, s(x_i, y) - m) for y != y_i, per
  example (`negative_spreadout`): all the items are negatives, so it does not
  depend on the batch (a contrastive loss's negative term, a hinge on the
  negatives). It pushes an item away from the contexts it does not follow,
  which the item table's spreadout never does: on real MovieLens, hinge +
  item spreadout pulls a popular movie toward every context that precedes it
  and nothing pushes it away from the others.
  Without a margin (all s^2) it does nothing useful: once the item table is
  spread out, sum_y s(x, y)^2 = x^T (Y^T Y) x is the same for every unit x.
"""

import dataclasses
from typing import Any, Dict, Optional

import tensorflow as tf

SPREADOUT_FORMS = ("frobenius", "mean")
PLACES = ("item", "context", "cross", "negative")
# The score a model gives a column that is not an item (the padding row):
# softmaxes give it no weight, and `negative_spreadout` leaves it out.
PADDING_SCORE = -1e9
# Cosine above which a negative is pushed away from a context (`negative`);
# chosen on ml-latest-small.
DEFAULT_NEGATIVE_MARGIN = 0.5


def check_form(form: str) -> str:
  if form not in SPREADOUT_FORMS:
    raise ValueError(f"--spreadout_form must be one of {', '.join(SPREADOUT_FORMS)}, "
                     f"got '{form}'")
  return form


@dataclasses.dataclass(frozen=True)
class SpreadoutWeights:
  """How much spreadout an objective adds, where, and in which form.

  `negative` None means the objective's default (`registry.spreadout_for`
  resolves it: H+S has a negative term, BS + spreadout has none).
  """
  item: float = 0.0
  context: float = 0.0
  cross: float = 0.0
  negative: Optional[float] = None
  negative_margin: float = DEFAULT_NEGATIVE_MARGIN
  form: str = "frobenius"

  def __post_init__(self):
    for place in PLACES:
      prefix = "" if place == "item" else f"{place}_"
      if (getattr(self, place) or 0.0) < 0:
        raise ValueError(f"--{prefix}spreadout_weight must be >= 0, got "
                         f"{getattr(self, place)}")
    if not -1.0 <= self.negative_margin < 1.0:
      raise ValueError("--negative_margin is a cosine in [-1, 1), got "
                       f"{self.negative_margin}")
    check_form(self.form)

  @property
  def any(self) -> bool:
    return any((getattr(self, place) or 0.0) > 0 for place in PLACES)


# The spreadout functions are straight-line TF ops: autograph is told not to
# convert them, which spared ~0.4 s of transpiling a training process.
@tf.autograph.experimental.do_not_convert
def reduce_off_diagonal(squared_sum: tf.Tensor, n: tf.Tensor, form: str) -> tf.Tensor:
  """The spreadout of `form` from S = sum_{i != j} s_ij^2 over n rows."""
  squared_sum = tf.maximum(squared_sum, 0.0)  # Rounding can make S slightly < 0.
  if form == "frobenius":
    # S > 0 for any two non-parallel rows; the floor keeps d sqrt finite.
    return tf.sqrt(tf.maximum(squared_sum, 1e-12))
  n = tf.cast(n, squared_sum.dtype)
  return squared_sum / tf.maximum(n * (n - 1.0), 1.0)


@tf.autograph.experimental.do_not_convert
def spreadout(embeddings: tf.Tensor, form: str = "frobenius", normalize: bool = True,
              exclude_first_row: bool = False) -> tf.Tensor:
  """Spreadout of the rows of `embeddings` [n, d] (see the module docstring)."""
  if exclude_first_row:
    embeddings = embeddings[1:]
  if normalize:
    embeddings = tf.math.l2_normalize(embeddings, axis=1)
  gram = tf.matmul(embeddings, embeddings, transpose_a=True)
  all_pairs = tf.reduce_sum(tf.square(gram))
  self_pairs = tf.reduce_sum(tf.square(tf.reduce_sum(tf.square(embeddings), axis=1)))
  return reduce_off_diagonal(all_pairs - self_pairs, tf.shape(embeddings)[0], form)


@tf.autograph.experimental.do_not_convert
def cross_spreadout(batch_scores: tf.Tensor, form: str = "frobenius") -> tf.Tensor:
  """Spreadout of the off-diagonal entries of a square [B, B] score matrix."""
  off_diagonal = tf.linalg.set_diag(batch_scores, tf.zeros_like(
      tf.linalg.diag_part(batch_scores)))
  return reduce_off_diagonal(tf.reduce_sum(tf.square(off_diagonal)),
                             tf.shape(batch_scores)[0], form)


@tf.autograph.experimental.do_not_convert
def negative_spreadout(labels: tf.Tensor, scores: tf.Tensor, margin: float,
                       form: str = "frobenius") -> tf.Tensor:
  """Spreadout of each context's scores [B, V] above `margin`, positive left out.

  Per example [B], over the columns j != labels[i] whose score is not
  `PADDING_SCORE`, with r_ij = max(0, s_ij - margin): `frobenius`
  sqrt(sum_j r_ij^2), `mean` the mean of r_ij^2.
  """
  is_negative = tf.logical_and(
      scores > PADDING_SCORE / 2,
      tf.logical_not(tf.one_hot(labels, tf.shape(scores)[1], on_value=True,
                                off_value=False)))
  excess = tf.where(is_negative, tf.nn.relu(scores - margin), tf.zeros_like(scores))
  squared_sum = tf.reduce_sum(tf.square(excess), axis=1)
  if form == "frobenius":
    # A context with no negative above the margin adds 0, and no gradient.
    violated = squared_sum > 0
    return tf.where(violated, tf.sqrt(tf.where(violated, squared_sum, 1.0)), 0.0)
  count = tf.reduce_sum(tf.cast(is_negative, scores.dtype), axis=1)
  return squared_sum / tf.maximum(count, 1.0)


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class SpreadoutRegularizer(tf.keras.regularizers.Regularizer):
  """`weight * spreadout(table)` as a Keras embeddings regularizer (padding row out)."""

  def __init__(self, weight: float = 1.0, form: str = "frobenius",
               normalize: bool = True, exclude_first_row: bool = True):
    if weight < 0:
      raise ValueError(f"--spreadout_weight must be >= 0, got {weight}")
    self.weight = float(weight)
    self.form = check_form(form)
    self.normalize = bool(normalize)
    self.exclude_first_row = bool(exclude_first_row)

  def __call__(self, embeddings: tf.Tensor) -> tf.Tensor:
    return self.weight * spreadout(embeddings, self.form, self.normalize,
                                   self.exclude_first_row)

  def get_config(self) -> Dict[str, Any]:
    return {"weight": self.weight, "form": self.form, "normalize": self.normalize,
            "exclude_first_row": self.exclude_first_row}


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class SpreadoutActivity(tf.keras.layers.Layer):
  """Identity layer that adds `weight * spreadout(batch outputs)` to the model's losses.

  Unlike a Keras `activity_regularizer`, the value is not divided by the batch
  size: the weight means the same as the item-table weight.
  """

  def __init__(self, weight: float, form: str = "frobenius", **kwargs):
    super().__init__(**kwargs)
    if weight < 0:
      raise ValueError(f"--context_spreadout_weight must be >= 0, got {weight}")
    self.weight = float(weight)
    self.form = check_form(form)

  def call(self, inputs):
    self.add_loss(self.weight * spreadout(inputs, self.form))
    return inputs

  def get_config(self) -> Dict[str, Any]:
    return {**super().get_config(), "weight": self.weight, "form": self.form}
