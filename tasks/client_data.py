"""Examples -> `tf.data` pipelines: one client dataset per user, and all examples.

The element of every dataset is `(context, label)`: an int32 vector of
`max_context_length` item ids and an int32 item id, batched as `([B, L], [B])`.
Batching keeps the short last batch: no example is silently dropped.
"""

from typing import Optional

import numpy as np
import tensorflow as tf

from tasks.movielens.sequence_examples import Examples


def _tensor_slices(examples: Examples) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensor_slices(
      (examples.contexts.astype(np.int32), examples.labels.astype(np.int32)))


class ClientDatasets:
  """One client per user (id = the user id as a string) and its training batches.

  A client's dataset is built from NumPy slices of the examples, shuffled in
  NumPy by its seed: no TensorFlow op runs per client in Python, which made
  building a round's 100 client datasets through TFF's `ClientData` take
  0.54 s (0.16 s with tf.data shuffling of NumPy slices, 0.05 s this way).
  """

  def __init__(self, examples: Examples):
    self._ranges = examples.user_ranges()
    self._contexts = examples.contexts.astype(np.int32)
    self._labels = examples.labels.astype(np.int32)
    self.client_ids = [str(u) for u in sorted(self._ranges)]

  def num_examples(self, client_id: str) -> int:
    start, stop = self._ranges[int(client_id)]
    return stop - start

  def training_dataset(self, client_id: str, batch_size: int, epochs: int = 1,
                       shuffle_seed: Optional[int] = None) -> tf.data.Dataset:
    """`epochs` passes over the client's examples (each pass in its own order
    when seeded), batched, the short last batch kept."""
    _check_batching(batch_size, epochs)
    if int(client_id) not in self._ranges:
      raise KeyError(f"unknown client id {client_id}")
    start, stop = self._ranges[int(client_id)]
    rng = np.random.default_rng(shuffle_seed)
    rows = np.concatenate([
        start + (rng.permutation(stop - start) if shuffle_seed is not None
                 else np.arange(stop - start)) for _ in range(epochs)])
    return tf.data.Dataset.from_tensor_slices(
        (self._contexts[rows], self._labels[rows])).batch(batch_size)


def _check_batching(batch_size: int, epochs: int) -> None:
  if batch_size < 1:
    raise ValueError(f"--batch_size must be >= 1, got {batch_size}")
  if epochs < 1:
    raise ValueError(f"--local_epochs/--epochs must be >= 1, got {epochs}")


def batch_for_training(dataset: tf.data.Dataset, batch_size: int,
                       epochs: int = 1, shuffle_seed: Optional[int] = None,
                       shuffle_buffer: int = 10_000) -> tf.data.Dataset:
  """Shuffles (when seeded), repeats `epochs` times and batches, keeping the remainder."""
  _check_batching(batch_size, epochs)
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
