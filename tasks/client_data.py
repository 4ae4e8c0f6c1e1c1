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
  """One client per user; a client's dataset is built only when asked for."""
  ranges = examples.user_ranges()

  def dataset_for_client(client_id: str) -> tf.data.Dataset:
    start, stop = ranges[int(client_id)]
    return _tensor_slices(examples.take(slice(start, stop)))

  return tff.simulation.datasets.ClientData.from_clients_and_fn(
      [str(user) for user in ranges], dataset_for_client)


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
