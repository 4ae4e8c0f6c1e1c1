"""Keras `fit` that trains a chunk of batches in each of its steps.

Keras's training loop fetches one dataset element per batch; on this machine a
fetch costs ~0.1 ms, as much as a whole step of the small models here (a
batch-softmax step of 16 examples), which held centralized training at 0.4-0.6
of a tight loop over the same batches. `ChunkedSteps` takes an element of
`client_data.shuffled_chunks` (up to `--steps_per_execution` batches and their
lengths) and runs one optimizer step per batch in a graph loop: the same
steps in the same order as one batch per Keras step, with one fetch for the
chunk.
"""

from typing import Tuple

import tensorflow as tf

from fed_retrieval.algorithms import optimizers


class ChunkedSteps(tf.keras.Model):
  """A functional model (built on another model's inputs and outputs, so the
  same layers and variables) whose `train_step` trains each batch of a chunk
  in turn, with Keras's loss, regularization losses and optimizer (plain SGD
  stepped in place, `optimizers.sgd_in_place`: the same values).

  Build it with `ChunkedSteps.on(model)`. Its step over one batch is the
  graph function XLA compiles when `batch_jit_compile` (Keras's own
  `jit_compile` would compile the loop around it, whose short last batch of
  a pass has a shape known only at run time).
  """

  def __init__(self, *args, batch_jit_compile: bool = False, **kwargs):
    super().__init__(*args, **kwargs)
    self._train_batch = tf.function(self._train_one_batch, jit_compile=batch_jit_compile)
    # The training loss over the epoch's examples (Keras means its batches'
    # losses; a short batch counts here for its examples only).
    self.loss_tracker = tf.keras.metrics.Mean(name="loss")

  @classmethod
  def on(cls, model: tf.keras.Model, batch_jit_compile: bool = False) -> "ChunkedSteps":
    return cls(inputs=model.inputs, outputs=model.outputs, name=model.name,
               batch_jit_compile=batch_jit_compile)

  def compile(self, optimizer="rmsprop", **kwargs):
    super().compile(optimizer=optimizer, **kwargs)
    # Keras's plain SGD, in place: the same values without its per-step
    # bookkeeping and sparse-row deduplication (a batch-softmax step of batch
    # 16 on ml1m 0.04 ms against 0.07 ms; an XC step on a bag of features
    # 1.9 ms against 7.4 ms).
    self._steps_in_place = optimizers.keras_steps_in_place(self.optimizer)

  @property
  def metrics(self):
    return [self.loss_tracker]

  def _train_one_batch(self, inputs, labels) -> tf.Tensor:
    """One optimizer step on the compiled loss plus the regularization losses;
    returns that loss."""
    with tf.GradientTape() as tape:
      loss = self.loss(labels, self(inputs, training=True))
      if self.losses:
        loss += tf.add_n(self.losses)
    if self._steps_in_place:
      optimizers.sgd_in_place(self.trainable_variables,
                              tape.gradient(loss, self.trainable_variables),
                              self.optimizer.learning_rate)
      self.optimizer.iterations.assign_add(1)
    else:
      self.optimizer.minimize(loss, self.trainable_variables, tape=tape)
    return loss

  def _train_batches(self, inputs, labels, lengths: tf.Tensor,
                     all_full: bool) -> Tuple[tf.Tensor, tf.Tensor]:
    """Trains the chunk's batches in turn: (sum of loss x batch length, examples).
    With `all_full` every batch has the static full size; otherwise each is cut
    to its length."""

    def train_batch(index, loss_sum):
      batch = tf.nest.map_structure(lambda t: t[index], (inputs, labels))
      if not all_full:
        batch = tf.nest.map_structure(lambda t: t[:lengths[index]], batch)
      length = tf.cast(lengths[index], tf.float32)
      return index + 1, loss_sum + length * self._train_batch(*batch)

    _, loss_sum = tf.while_loop(lambda index, _: index < tf.shape(lengths)[0],
                                train_batch, (tf.constant(0), tf.constant(0.0)))
    return loss_sum, tf.cast(tf.reduce_sum(lengths), tf.float32)

  def train_step(self, data: Tuple[Tuple[tf.Tensor, tf.Tensor], tf.Tensor]):
    (inputs, labels), lengths = data
    # Only a pass's last batch can be short: chunks of full batches (nearly
    # all) keep the step's static shapes. (Keras does not convert
    # `train_step` with autograph: explicit loops and conditions.)
    loss_sum, examples = tf.cond(
        tf.reduce_all(lengths == labels.shape[1]),
        lambda: self._train_batches(inputs, labels, lengths, all_full=True),
        lambda: self._train_batches(inputs, labels, lengths, all_full=False))
    self.loss_tracker.update_state(loss_sum / examples, sample_weight=examples)
    return {"loss": self.loss_tracker.result()}
