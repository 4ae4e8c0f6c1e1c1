"""FedAwS's server step: spread the class embeddings apart (paper 000, Sec. 4).

After a round the server holds the class table W [C, D] and the classes C'
whose rows the round's clients updated. Distances are between L2-normalized
rows, d(w, w') = ||w/|w| - w'/|w'|||, as the model scores with cosines.

- `all` (eq. 7): reg = sum_{c in C'} sum_{c' != c} max(0, nu - d(w_c, w_c'))^2,
  every updated class against every other class, pushed apart to margin nu.
- `topk` (eq. 8, stochastic negative mining): reg = - sum_{c in C'}
  sum_{y in N_k(c)} d(w_c, w_y)^2, with N_k(c) the k classes nearest to c. The
  extraction of the paper lost the sign; the minus is the reading under which
  minimizing pushes each class away from its k most confusable classes (the
  paper's "adaptive nu": only classes closer than the (k+1)-th count).
  N_k(c) is found with a chunked exact search (`scoring.chunked_top_k`), or
  given (an approximate search on large tables), and held fixed while
  differentiating.

`spreadout_step` returns W - learning_rate * grad reg(W) (the paper's Step 14,
with learning_rate = lambda * eta). Only the rows of C' and of their
neighbours (topk) or all rows (all) move.
"""

from typing import Optional

import tensorflow as tf

from fed_retrieval.models import scoring

SPREADOUT_MODES = ("topk", "all")


# Straight-line TF ops (Python conditions on arguments only; the top-k's loop is
# its own graph): autograph is told not to convert them.
@tf.autograph.experimental.do_not_convert
def nearest_classes(table: tf.Tensor, class_ids: tf.Tensor, k: int,
                    max_scores_in_memory: int = 2 ** 25) -> tf.Tensor:
  """[n, k] ids of the k classes nearest to each of `class_ids` (itself excluded)."""
  normalized = scoring.l2_normalize(table)
  _, top = scoring.chunked_top_k(tf.gather(normalized, class_ids), normalized, k + 1,
                                 max_scores_in_memory)
  # Drop the class itself (or, for exact duplicates, the (k+1)-th row).
  is_self = tf.equal(top, tf.cast(class_ids, top.dtype)[:, None])
  has_self = tf.reduce_any(is_self, axis=1, keepdims=True)
  keep = tf.logical_not(is_self) & (has_self | (tf.range(k + 1) < k)[None, :])
  return tf.reshape(tf.boolean_mask(top, keep), [-1, k])


@tf.autograph.experimental.do_not_convert
def topk_regularizer(rows: tf.Tensor, neighbour_rows: tf.Tensor) -> tf.Tensor:
  """-sum d^2 of rows [n, D] to their neighbours [n, k, D] (unnormalized inputs)."""
  a = scoring.l2_normalize(rows)[:, None, :]
  b = scoring.l2_normalize(neighbour_rows)
  return -tf.reduce_sum(tf.square(a - b))


@tf.autograph.experimental.do_not_convert
def all_pairs_regularizer(rows: tf.Tensor, row_ids: tf.Tensor, table: tf.Tensor,
                          margin: float) -> tf.Tensor:
  """sum over rows [n, D] and every other class of max(0, margin - d)^2."""
  a = scoring.l2_normalize(rows)
  b = scoring.l2_normalize(table)
  squared = tf.maximum(2.0 - 2.0 * tf.matmul(a, b, transpose_b=True), 0.0)
  # sqrt has no gradient at 0: the pair of a class with itself is masked out.
  not_self = tf.not_equal(tf.range(tf.shape(table)[0])[None, :],
                          tf.cast(row_ids, tf.int32)[:, None])
  distance = tf.sqrt(tf.where(not_self, squared, tf.ones_like(squared)))
  hinge = tf.where(not_self, tf.maximum(margin - distance, 0.0), tf.zeros_like(distance))
  return tf.reduce_sum(tf.square(hinge))


@tf.autograph.experimental.do_not_convert
def spreadout_step(table: tf.Tensor, class_ids: tf.Tensor, learning_rate: float,
                   mode: str = "topk", k: int = 10, margin: float = 1.0,
                   max_scores_in_memory: int = 2 ** 25,
                   neighbours: Optional[tf.Tensor] = None) -> tf.Tensor:
  """W - learning_rate * grad reg(W), for the updated classes `class_ids` [n].
  `neighbours` [n, k] (topk): N_k found elsewhere (an approximate search,
  `class_neighbours`); None: the exact search here."""
  if mode not in SPREADOUT_MODES:
    raise ValueError(f"--spreadout must be one of {', '.join(SPREADOUT_MODES)}, got "
                     f"'{mode}'")
  table = tf.convert_to_tensor(table)
  class_ids = tf.cast(class_ids, tf.int32)
  if mode == "topk":
    if neighbours is None:  # With fewer than k other classes: all of them.
      neighbours = nearest_classes(table, class_ids, min(k, table.shape[0] - 1),
                                   max_scores_in_memory)
    rows, neighbour_rows = tf.gather(table, class_ids), tf.gather(table, neighbours)
    with tf.GradientTape() as tape:
      tape.watch([rows, neighbour_rows])
      value = topk_regularizer(rows, neighbour_rows)
    row_grad, neighbour_grad = tape.gradient(value, [rows, neighbour_rows])
    ids = tf.concat([class_ids, tf.reshape(neighbours, [-1])], axis=0)
    grads = tf.concat([row_grad, tf.reshape(neighbour_grad, [-1, table.shape[-1]])], 0)
    return tf.tensor_scatter_nd_sub(table, ids[:, None], learning_rate * grads)
  rows = tf.gather(table, class_ids)
  with tf.GradientTape() as tape:
    tape.watch([rows, table])
    value = all_pairs_regularizer(rows, class_ids, table, margin)
  row_grad, table_grad = tape.gradient(value, [rows, table])
  table_grad = tf.tensor_scatter_nd_add(table_grad, class_ids[:, None], row_grad)
  return table - learning_rate * table_grad
