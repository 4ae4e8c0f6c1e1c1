"""KerasVariableModel: from_keras_model's model, its loss computed once a batch."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import client_shards
from fed_retrieval.models import variable_model
from tasks import client_data

SPEC = (tf.TensorSpec([None, 3], tf.float32), tf.TensorSpec([None], tf.float32))
BATCHES = [(np.array([[1.0, 2.0, 0.0], [0.5, -1.0, 2.0]], np.float32),
            np.array([1.0, -1.0], np.float32)),
           (np.array([[0.0, 1.0, 1.0]], np.float32), np.array([2.0], np.float32))]


class CountingLoss(tf.keras.losses.MeanSquaredError):
  """MSE that counts how often it is traced into a graph."""

  def __init__(self):
    super().__init__()
    self.calls = 0

  def __call__(self, y_true, y_pred, sample_weight=None):
    self.calls += 1
    return super().__call__(y_true, y_pred, sample_weight)


def keras_model() -> tf.keras.Model:
  """A regularized linear model, the same weights every time."""
  inputs = tf.keras.Input(shape=(3,))
  outputs = tf.keras.layers.Dense(
      1, kernel_initializer=tf.keras.initializers.Constant([[0.5], [-0.25], [1.0]]),
      kernel_regularizer=tf.keras.regularizers.L2(0.1))(inputs)
  return tf.keras.Model(inputs, tf.squeeze(outputs, -1))


def both_models(loss=None):
  ours = variable_model.KerasVariableModel(keras_model(), loss or CountingLoss(), SPEC)
  stock = tff.learning.models.from_keras_model(
      keras_model(), loss=loss or CountingLoss(), input_spec=SPEC)
  return ours, stock


def test_forward_passes_losses_gradients_and_metrics_equal_from_keras_models():
  ours, stock = both_models()
  for batch in BATCHES:
    results = []
    for model in (ours, stock):
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch)
      results.append((output.loss, output.num_examples,
                      tape.gradient(output.loss, model.trainable_variables)))
    for got, want in zip(tf.nest.flatten(results[0]), tf.nest.flatten(results[1])):
      np.testing.assert_array_equal(got, want)
  assert list(ours.report_local_unfinalized_metrics()) == ["loss", "num_examples",
                                                           "num_batches"]
  ours_metrics = ours.report_local_unfinalized_metrics()
  stock_metrics = stock.report_local_unfinalized_metrics()
  assert tf.nest.map_structure(np.asarray, dict(ours_metrics)) == \
      tf.nest.map_structure(np.asarray, dict(stock_metrics))
  assert list(ours_metrics["num_examples"]) == [3] and list(ours_metrics["num_batches"]) == [2]
  # The loss metric is the data loss alone; the trained loss adds the L2 term.
  data_loss = np.mean((BATCHES[1][0] @ [0.5, -0.25, 1.0] - BATCHES[1][1]) ** 2)
  with tf.GradientTape():
    trained_loss = float(ours.forward_pass(BATCHES[1]).loss)
  np.testing.assert_allclose(trained_loss, data_loss + 0.1 * (0.25 + 0.0625 + 1.0),
                             rtol=1e-6)
  assert list(ours.metric_finalizers()) == list(stock.metric_finalizers())
  ours.reset_metrics()
  assert [float(v) for v in ours.report_local_unfinalized_metrics()["loss"]] == [0.0, 0.0]


def test_the_loss_is_traced_once_a_forward_pass_against_twice_in_from_keras_model():
  ours_loss, stock_loss = CountingLoss(), CountingLoss()
  ours = variable_model.KerasVariableModel(keras_model(), ours_loss, SPEC)
  stock = tff.learning.models.from_keras_model(keras_model(), loss=stock_loss,
                                               input_spec=SPEC)
  ours.forward_pass(BATCHES[0])
  stock.forward_pass(BATCHES[0])
  assert (ours_loss.calls, stock_loss.calls) == (1, 2)


def test_a_sharded_fedavg_round_equals_from_keras_models(tff_context):
  """Weights and finalized metrics (loss, num_examples, num_batches) of a
  round of two clients in one shard, the client step tracing the forward pass
  into its own graph (`client_shards`)."""
  data = client_data.ClientDatasets(
      np.concatenate([b[0] for b in BATCHES] * 2), np.concatenate([b[1] for b in BATCHES] * 2),
      {"0": np.arange(0, 4), "1": np.arange(4, 6)})
  shard = data.shard_dataset(["0", "1"], 2, 1, [5, 6])
  outputs = []
  for model_fn in (lambda: both_models()[0], lambda: both_models()[1]):
    process = client_shards.build_sharded_process(
        model_fn, tff.learning.optimizers.build_sgdm(1.0),
        tff.learning.optimizers.build_sgdm(0.1), batch_size=2)
    state = process.initialize()
    output = process.next(state, [shard])
    outputs.append((process.get_model_weights(output.state),
                    output.metrics["client_work"]["train"]))
  (ours_weights, ours_metrics), (stock_weights, stock_metrics) = outputs
  for got, want in zip(tf.nest.flatten(ours_weights), tf.nest.flatten(stock_weights)):
    np.testing.assert_array_equal(got, want)
  assert np.abs(ours_weights.trainable[0].ravel() - [0.5, -0.25, 1.0]).sum() > 0.01
  assert dict(ours_metrics) == dict(stock_metrics)
  assert (ours_metrics["num_examples"], ours_metrics["num_batches"]) == (6, 3)
