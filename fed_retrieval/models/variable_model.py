"""A Keras model and its loss as a TFF `VariableModel` that computes the loss once a batch.

`tff.learning.models.from_keras_model` computes each batch's loss twice: once
for the gradient and again inside its `loss` metric, whose `update_state`
calls the loss function on the same predictions, and its forward pass calls
the Keras model through another `tf.function`. `KerasVariableModel` is the
same model with the metric fed the loss already computed and the Keras model
called in the forward pass itself: the same variables, metrics (the given
ones, then `loss`, `num_examples`, `num_batches`, in that order) and
finalizers, and the same ops, so the same weights and metrics
(`tests/test_variable_model.py` checks both against `from_keras_model`).
As there, the `loss` metric is the mean loss function's value without the
model's regularization losses, which the trained loss adds.
A batch-softmax shard of 50 clients (`client_shards`, which traces the
forward pass into its step; in-process, 60 alternating repeats, one-off
script) took 0.947 of its time with `from_keras_model` (0.967 with
`from_keras_model` traced in the same way; global softmax 0.965 and 0.985)."""

import collections
from typing import Any, Callable, OrderedDict, Sequence

import tensorflow as tf
import tensorflow_federated as tff


class KerasVariableModel(tff.learning.models.VariableModel):
  """`from_keras_model(keras_model, loss, input_spec, metrics)` for batches of
  `(x, y)` and one loss, the loss computed once a batch. `metrics` are Keras
  metric instances updated with `(y_true, y_pred)`."""

  def __init__(self, keras_model: tf.keras.Model,
               loss: Callable[[Any, Any], tf.Tensor], input_spec,
               metrics: Sequence[tf.keras.metrics.Metric] = ()):
    if len(input_spec) != 2:
      raise ValueError(f"input_spec must be (x, y) specs, got {input_spec}")
    self._keras_model = keras_model
    self._loss = loss
    self._input_spec = input_spec
    # What each metric's finalizer rebuilds it from: the given instances, the
    # built-in ones' constructors (as from_keras_model; Keras cannot rebuild a
    # Mean from its config). The counters unless given.
    constructors = collections.OrderedDict((metric.name, metric) for metric in metrics)
    if "loss" in constructors:
      raise ValueError("a metric named 'loss' would hide the loss metric")
    constructors["loss"] = lambda: tf.keras.metrics.Mean(name="loss")
    for counter in (tff.learning.metrics.NumExamplesCounter,
                    tff.learning.metrics.NumBatchesCounter):
      constructors.setdefault(counter().name, counter)
    self._finalized_from = constructors
    self._metrics = [m if isinstance(m, tf.keras.metrics.Metric) else m()
                     for m in constructors.values()]
    self._loss_metric = self._metrics[list(constructors).index("loss")]

  @property
  def trainable_variables(self):
    return self._keras_model.trainable_variables

  @property
  def non_trainable_variables(self):
    return self._keras_model.non_trainable_variables

  @property
  def local_variables(self):
    return [v for metric in self._metrics for v in metric.variables]

  @property
  def input_spec(self):
    return self._input_spec

  @tf.function(autograph=False)
  def predict_on_batch(self, x, training=True):
    return self._keras_model(x, training=training)

  @tf.function(autograph=False)
  def forward_pass(self, batch_input, training=True):
    x, y = batch_input
    predictions = self._keras_model(x, training=training)
    data_loss = self._loss(y, predictions)
    loss = tf.add_n([data_loss] + self._keras_model.losses)
    for metric in self._metrics:
      if metric is self._loss_metric:
        metric.update_state(data_loss, tf.shape(tf.nest.flatten(predictions)[0])[0])
      else:
        metric.update_state(y_true=y, y_pred=predictions)
    return tff.learning.models.BatchOutput(
        loss=loss, predictions=predictions,
        num_examples=tf.shape(tf.nest.flatten(x)[0])[0])

  @tf.function(autograph=False)
  def report_local_unfinalized_metrics(self) -> OrderedDict[str, list]:
    return collections.OrderedDict(
        (metric.name, [v.read_value() for v in metric.variables])
        for metric in self._metrics)

  def metric_finalizers(self) -> OrderedDict[str, Callable]:
    return collections.OrderedDict(
        (name, tff.learning.metrics.create_keras_metric_finalizer(constructor))
        for name, constructor in self._finalized_from.items())

  @tf.function(autograph=False)
  def reset_metrics(self):
    for metric in self._metrics:
      metric.reset_state()
