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
  N_k(c) is held fixed while differentiating.

`spreadout_step` returns W - learning_rate * grad reg(W) (the paper's Step 14,
with learning_rate = lambda * eta), N_k(c) found by a chunked exact search
(`scoring.chunked_top_k`), the gradient by autodiff (the definition the
closed form is tested against). Only the rows of C' and of their neighbours
(topk) or all rows (all) move. `topk_step` is the topk step on given
neighbours (an approximate search on large tables, `class_neighbours`), on
the rows that move only, its gradient in closed form.
"""

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
def topk_step(rows: tf.Tensor, class_ids: tf.Tensor, neighbours: tf.Tensor,
              learning_rate: float) -> tf.Tensor:
  """`spreadout_step`'s topk step on the rows it moves only: `rows` [R, D]
  (the updated classes' and their neighbours'), `class_ids` [n] and
  `neighbours` [n, k] positions among them. The regularizer's gradient in
  closed form: with u = w / |w|, d(u_c . u_y) / dw_c = (u_y - (u_c . u_y)
  u_c) / |w_c|, so each row's gradient is 2 (I - u u^T) / |w| times the sum
  of the unit rows it is paired with (its neighbours' if it is updated, the
  classes' it is a neighbour of), two sparse products. The same step as
  autodiff's to rounding (tested) without its [n, k, D] tensors: at
  Amazon-670K's shape (39,000 updated classes, k = 10, 310,735 rows moved)
  0.19 CPU s against 0.35 (one-off, 2 cores)."""
  inverse = tf.math.rsqrt(tf.maximum(tf.reduce_sum(tf.square(rows), 1, keepdims=True),
                                     1e-12))  # As `scoring.l2_normalize`.
  unit = rows * inverse
  n, k = (tf.shape(neighbours, out_type=tf.int64)[i] for i in (0, 1))
  pairs = tf.sparse.SparseTensor(  # [n, R]: class i with each of its neighbours.
      tf.stack([tf.repeat(tf.range(n), k), tf.cast(tf.reshape(neighbours, [-1]), tf.int64)],
               1), tf.ones([n * k]), tf.stack([n, tf.shape(rows, out_type=tf.int64)[0]]))
  class_ids = tf.cast(class_ids, tf.int32)
  half_unit_grad = tf.tensor_scatter_nd_add(
      tf.sparse.sparse_dense_matmul(pairs, tf.gather(unit, class_ids), adjoint_a=True),
      class_ids[:, None], tf.sparse.sparse_dense_matmul(pairs, unit))
  half_grad = (half_unit_grad - tf.reduce_sum(half_unit_grad * unit, 1, keepdims=True)
               * unit) * inverse
  # The 2 of the gradient scales by a power of two, exactly, wherever it is
  # taken: one pass over the rows fewer.
  return rows - (2.0 * learning_rate) * half_grad


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
                   max_scores_in_memory: int = 2 ** 25) -> tf.Tensor:
  """W - learning_rate * grad reg(W), for the updated classes `class_ids` [n]."""
  if mode not in SPREADOUT_MODES:
    raise ValueError(f"--spreadout must be one of {', '.join(SPREADOUT_MODES)}, got "
                     f"'{mode}'")
  table = tf.convert_to_tensor(table)
  class_ids = tf.cast(class_ids, tf.int32)
  if mode == "topk":
    # With fewer than k other classes: all of them.
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
