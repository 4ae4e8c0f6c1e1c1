"""Centralized training in chunks of batches: the same batches, the same steps."""

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.training import chunked_steps
from tasks import client_data

# 10 rows, batches of 3: a pass is 3 + 3 + 3 + 1.
ARRAYS = (np.arange(20, dtype=np.float32).reshape(10, 2), np.arange(10, dtype=np.int32))


def test_chunks_hold_the_shuffled_batches_in_order_never_across_an_epoch():
  batches = [labels for _, labels in client_data.shuffled_batches(
      ARRAYS, 3, shuffle_seed=4, epochs=None).take(15).as_numpy_iterator()]
  # Keras epochs of 5 batches, chunks of up to 2: 2 + 2 + 1 batches an epoch.
  chunks = list(client_data.shuffled_chunks(ARRAYS, 3, batches_per_epoch=5, chunk_size=2,
                                            shuffle_seed=4).take(9).as_numpy_iterator())
  assert [len(lengths) for _, lengths in chunks] == [2, 2, 1] * 3
  unpacked = [(inputs[i, :n], labels[i, :n])
              for (inputs, labels), lengths in chunks for i, n in enumerate(lengths)]
  assert [list(labels) for _, labels in unpacked] == [list(b) for b in batches]
  for inputs, labels in unpacked:  # Rows stay together.
    np.testing.assert_array_equal(inputs[:, 0], 2 * labels)
  # The pass's short batch (the 4th and the 8th batch) is padded with row 0.
  (inputs, labels), lengths = chunks[1]
  assert list(lengths) == [3, 1] and list(labels[1, 1:]) == [0, 0]
  np.testing.assert_array_equal(inputs[1, 1:], [ARRAYS[0][0]] * 2)


@pytest.mark.parametrize("argument", ["batches_per_epoch", "chunk_size"])
def test_chunks_refuse_an_empty_epoch_or_chunk(argument):
  sizes = {"batches_per_epoch": 5, "chunk_size": 2, argument: 0}
  with pytest.raises(ValueError, match="--steps_per_execution"):
    client_data.shuffled_chunks(ARRAYS, 3, shuffle_seed=0, **sizes)


def _model() -> tf.keras.Model:
  """A dense layer with a regularizer, plus an embedding row picked by the
  first input (rows repeat within a batch: a sparse gradient with repeats)."""
  inputs = tf.keras.Input([2])
  dense = tf.keras.layers.Dense(
      4, kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1),
      kernel_regularizer=tf.keras.regularizers.L2(0.01))(inputs)
  rows = tf.keras.layers.Lambda(lambda x: tf.cast(x[:, 0] * 10, tf.int32) % 3)(inputs)
  embedded = tf.keras.layers.Embedding(
      3, 4, embeddings_initializer=tf.keras.initializers.RandomUniform(seed=2))(rows)
  return tf.keras.Model(inputs, dense + embedded)


OPTIMIZERS = {"adam": lambda: tf.keras.optimizers.Adam(0.05),
              "sgd": lambda: tf.keras.optimizers.SGD(0.1)}


def _fit(model, dataset, steps_per_epoch: int, epochs: int, optimizer: str):
  model.compile(optimizer=OPTIMIZERS[optimizer](),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
  history = model.fit(dataset, steps_per_epoch=steps_per_epoch, epochs=epochs, verbose=0)
  return model, history.history["loss"]


@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("batch_jit_compile", [False, True])
def test_a_chunked_fit_takes_the_steps_of_a_batch_a_step(batch_jit_compile, optimizer):
  # 2 Keras epochs of 5 batches (the short batch of a pass among them), chunks
  # of 3: 3 + 2 batches a Keras step; a regularizer's loss, embedding rows
  # repeated in a batch. Plain SGD steps in place, Adam through Keras: both
  # as Keras's own optimizer steps one batch a step.
  arrays = (ARRAYS[0] / 10, ARRAYS[1] % 4)
  one, one_losses = _fit(_model(), client_data.shuffled_batches(
      arrays, 3, shuffle_seed=2, epochs=None), 5, 2, optimizer)
  chunked, chunked_losses = _fit(
      chunked_steps.ChunkedSteps.on(_model(), batch_jit_compile=batch_jit_compile),
      client_data.shuffled_chunks(arrays, 3, 5, 3, shuffle_seed=2), 2, 2, optimizer)
  assert chunked._steps_in_place == (optimizer == "sgd")  # pylint: disable=protected-access
  for a, b in zip(one.get_weights(), chunked.get_weights()):
    np.testing.assert_allclose(a, b, atol=1e-5)
  assert int(chunked.optimizer.iterations) == int(one.optimizer.iterations) == 10
  assert chunked_losses[1] < chunked_losses[0]
  # Keras means the batches' losses; the chunked loop weighs them by examples
  # (the short batch counts for 1 of 13): close, not equal.
  np.testing.assert_allclose(chunked_losses, one_losses, rtol=0.1)
