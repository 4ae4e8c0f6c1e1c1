"""Scores of query embeddings against candidate rows of an embedding table.

Three ways to score, for three needs:
- `candidate_scores`: against a given candidate set (the rows a client holds:
  its own classes, its positives, sampled negatives), [B, K]: FedAwS clients
  score each instance against its own class row; the losses of
  `losses/retrieval_losses.py` take such scores with labels that are positions
  in the candidate set.
- `dual_encoder.score_items` (the dual encoder's output): against every row,
  [B, V]; for global softmax on small vocabularies.
- `chunked_top_k`: the k best rows of every query over the whole table, a
  block of queries at a time, so a large label space never becomes a dense
  N x C matrix in memory (evaluation, and the server's nearest-class search).
"""

from typing import Tuple

import tensorflow as tf


def l2_normalize(embeddings: tf.Tensor) -> tf.Tensor:
  return tf.math.l2_normalize(embeddings, axis=-1, epsilon=1e-12)


def candidate_scores(queries: tf.Tensor, table: tf.Tensor,
                     candidate_ids: tf.Tensor) -> tf.Tensor:
  """Dot products of queries [B, D] with table rows `candidate_ids`.

  `candidate_ids` [K] (one set for the batch) gives [B, K]; [B, K] (a set per
  query) gives [B, K] too.
  """
  candidate_ids = tf.convert_to_tensor(candidate_ids)
  candidates = tf.gather(table, candidate_ids)
  if candidate_ids.shape.rank == 1:
    return tf.matmul(queries, candidates, transpose_b=True)
  return tf.einsum("bd,bkd->bk", queries, candidates)


@tf.function(reduce_retracing=True, autograph=False)
def chunked_top_k(queries: tf.Tensor, table: tf.Tensor, k: int,
                  max_scores_in_memory: int = 2 ** 25
                  ) -> Tuple[tf.Tensor, tf.Tensor]:
  """(scores, row ids) [N, k] of each query's k highest dot products with `table`.

  Queries are taken `max_scores_in_memory // num_rows` at a time (at least one),
  so the working set is about `max_scores_in_memory` floats (128 MiB) however
  large N and the table are. Ties go to the lower row id.
  """
  queries = tf.convert_to_tensor(queries)
  table = tf.convert_to_tensor(table)
  num_queries = tf.shape(queries)[0]
  chunk = tf.maximum(1, max_scores_in_memory // tf.maximum(tf.shape(table)[0], 1))
  num_chunks = (num_queries + chunk - 1) // chunk

  def block(i):
    rows = queries[i * chunk:tf.minimum((i + 1) * chunk, num_queries)]
    return tf.math.top_k(tf.matmul(rows, table, transpose_b=True), k=k)

  values = tf.TensorArray(table.dtype, size=num_chunks, infer_shape=False)
  indices = tf.TensorArray(tf.int32, size=num_chunks, infer_shape=False)

  def add_block(i, values, indices):
    top = block(i)
    return i + 1, values.write(i, top.values), indices.write(i, top.indices)

  _, values, indices = tf.while_loop(lambda i, values, indices: i < num_chunks, add_block,
                                     (tf.constant(0), values, indices))
  return tf.reshape(values.concat(), [-1, k]), tf.reshape(indices.concat(), [-1, k])
