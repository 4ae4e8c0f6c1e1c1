"""Examples -> `tf.data` pipelines: one lazily built client dataset per user.

The element of every dataset is `(context, label)`: an int32 vector of
`max_context_length` item ids and an int32 item id, batched as `([B, L], [B])`.
Batching keeps the short last batch: no example is silently dropped.
"""

from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tasks.sequence_examples import Examples


def _tensor_slices(examples: Examples) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices(
      (examples.contexts.astype(np.int32), examples.labels.astype(np.int32)))


def client_data_from_examples(examples: Examples) -> tff.simulation.datasets.ClientData:
  """One client per user (id = the user id as a string), built only when asked for.

  The dataset function is pure TensorFlow (a sorted-id search and a slice), so
  it also serves TFF's `dataset_computation`.
  """
  ranges = examples.user_ranges()
  users = np.fromiter(ranges, np.int64, len(ranges))
  starts = tf.constant([ranges[u][0] for u in users], tf.int64)
  stops = tf.constant([ranges[u][1] for u in users], tf.int64)
  sorted_users = tf.constant(users)
  contexts = tf.constant(examples.contexts.astype(np.int32))
  labels = tf.constant(examples.labels.astype(np.int32))

  def dataset_for_client(client_id: tf.Tensor) -> tf.data.Dataset:
    user = tf.strings.to_number(client_id, tf.int64)
    index = tf.searchsorted(sorted_users, tf.reshape(user, [1]))[0]
    tf.debugging.assert_equal(tf.gather(sorted_users, index), user,
                              message="unknown client id")
    rows = slice(starts[index], stops[index])
    return tf.data.Dataset.from_tensor_slices((contexts[rows], labels[rows]))

  return tff.simulation.datasets.ClientData.from_clients_and_tf_fn(
      [str(u) for u in users], dataset_for_client)


def batch_for_training(dataset: tf.data.Dataset, batch_size: int,
                       epochs: int = 1, shuffle_seed: Optional[int] = None,
                       shuffle_buffer: int = 10_000) -> tf.data.Dataset:
  """Shuffles (when seeded), repeats `epochs` times and batches, keeping the remainder."""
  if batch_size < 1:
    raise ValueError(f"--batch_size must be >= 1, got {batch_size}")
  if epochs < 1:
    raise ValueError(f"--local_epochs/--epochs must be >= 1, got {epochs}")
  if shuffle_seed is not None:
    dataset = dataset.shuffle(shuffle_buffer, seed=shuffle_seed,
                              reshuffle_each_iteration=True)
  return dataset.repeat(epochs).batch(batch_size)


def centralized_dataset(examples: Examples, batch_size: int,
                        shuffle_seed: Optional[int] = None,
                        epochs: int = 1) -> tf.data.Dataset:
  """All examples as one batched dataset (for Keras `fit` and evaluation)."""
  return batch_for_training(_tensor_slices(examples), batch_size, epochs,
                            shuffle_seed, shuffle_buffer=max(len(examples), 1))
