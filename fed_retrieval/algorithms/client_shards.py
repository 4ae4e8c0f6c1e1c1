"""FedAvg with many simulated clients in each TFF client call.

TFF runs one client computation per CLIENTS value. With 100 small clients a
round (MovieLens users: ~9 batches each), what each call costs around the
client's training (its dataset serialized, sent to the worker, rebuilt, a
graph run, the result sent back: ~4 ms here) outweighs the training itself.
Here a TFF client is a shard of simulated clients: its dataset holds their
batches one client after another, each batch marked when it starts a client
(`tasks.client_data.ClientDatasets.shard_dataset`). The shard trains each
client from the round's model with a fresh client optimizer, as FedAvg does,
and returns the example-weighted mean of their deltas with their total
weight. TFF's weighted mean over the shards is then FedAvg's over the
clients:
  sum_s W_s (sum_{k in s} n_k d_k / W_s) / sum_s W_s = sum_k n_k d_k / sum_k n_k.
A client whose delta is not finite counts with weight 0 (zeroed), as in TFF's
own client work. The process is composed from TFF's templates with the stock
broadcast, weighted mean and server-optimizer finalizer, so its state and
`get_model_weights` are those of `tff.learning.algorithms.build_weighted_fed_avg`.
What a shard cannot do: a per-client aggregator (client-level DP clips each
client's update; a shard's mean is not one client's), so DP runs keep one
TFF client per client.
"""

from typing import Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

ModelFn = Callable[[], tff.learning.models.VariableModel]


def _shard_update_fn(model: tff.learning.models.VariableModel,
                     optimizer: tff.learning.optimizers.Optimizer):
  """A tf.function: (client optimizer hparams, the round's weights, a shard's
  dataset) -> (ClientResult of the shard, its clients' summed metrics)."""

  @tf.function
  def shard_update(hparams, initial_weights, dataset):
    weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)
    # Tuples throughout: autograph would stack a list carried through the loop.
    trainable = tuple(tf.nest.flatten(weights.trainable))
    initial = tuple(tf.nest.flatten(initial_weights.trainable))
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)

    def fresh_optimizer_state():
      return optimizer.set_hparams(optimizer.initialize(specs), hparams)

    def add_client(total_delta, total_weight, client_examples):
      """Adds the client just trained (weight 0 if its delta is not finite)
      and puts the round's model back for the next one."""
      delta = tuple(i - v for i, v in zip(initial, trainable))
      finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(d)) for d in delta])
      weight = tf.where(finite, tf.cast(client_examples, tf.float32), 0.0)
      total_delta = tuple(total + tf.where(finite, d, tf.zeros_like(d)) * weight
                          for total, d in zip(total_delta, delta))
      for v, t in zip(trainable, initial):
        v.assign(t)
      return total_delta, total_weight + weight

    total_delta = tuple(tf.zeros_like(t) for t in initial)
    total_weight = tf.constant(0.0)
    client_examples = tf.constant(0, tf.int64)
    optimizer_state = fresh_optimizer_state()
    for batch, starts_client in dataset:
      if starts_client and client_examples > 0:
        total_delta, total_weight = add_client(total_delta, total_weight,
                                               client_examples)
        client_examples = tf.constant(0, tf.int64)
        optimizer_state = fresh_optimizer_state()
      with tf.GradientTape() as tape:
        output = model.forward_pass(batch, training=True)
      gradients = tape.gradient(output.loss, trainable)
      optimizer_state, updated = optimizer.next(optimizer_state, trainable,
                                                tuple(gradients))
      for v, t in zip(trainable, updated):
        v.assign(t)
      client_examples += tf.cast(output.num_examples, tf.int64)
    if client_examples > 0:
      total_delta, total_weight = add_client(total_delta, total_weight,
                                             client_examples)
    mean_delta = tf.nest.pack_sequence_as(
        initial_weights.trainable,
        [tf.math.divide_no_nan(d, total_weight) for d in total_delta])
    return (tff.learning.templates.ClientResult(update=mean_delta,
                                                update_weight=total_weight),
            model.report_local_unfinalized_metrics())

  return shard_update


def build_shard_client_work(model_fn: ModelFn,
                            optimizer: tff.learning.optimizers.Optimizer
                            ) -> tff.learning.templates.ClientWorkProcess:
  """FedAvg's client work (example-weighted) over shards of clients: each
  CLIENTS value is a `shard_dataset` of ((x, y), starts_client) batches."""
  with tf.Graph().as_default():  # Only for the types: no variables leak out.
    model = model_fn()
    metrics_aggregation = tff.learning.metrics.sum_then_finalize(
        model.metric_finalizers())
    element_type = tff.types.tensorflow_to_type(
        (model.input_spec, tf.TensorSpec([], tf.bool)))
    weights_type = tff.learning.models.weights_type_from_model(model)
  hparams = optimizer.get_hparams(optimizer.initialize(tf.TensorSpec([], tf.float32)))

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(hparams, tff.SERVER)

  state_type = init_fn.type_signature.result.member
  data_type = tff.SequenceType(element_type)

  @tff.tensorflow.computation(state_type, weights_type, data_type)
  def shard_update(state, initial_weights, dataset):
    return _shard_update_fn(model_fn(), optimizer)(state, initial_weights, dataset)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, shards):
    results, metrics = tff.federated_map(
        shard_update, (tff.federated_broadcast(state), weights, shards))
    measurements = tff.federated_zip({"train": metrics_aggregation(metrics)})
    return tff.templates.MeasuredProcessOutput(state, results, measurements)

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(state_type, state_type)
  def set_hparams_fn(state, new_hparams):
    del state
    return new_hparams

  return tff.learning.templates.ClientWorkProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)


def build_sharded_fed_avg(model_fn: ModelFn,
                          client_optimizer: tff.learning.optimizers.Optimizer,
                          server_optimizer: tff.learning.optimizers.Optimizer
                          ) -> tff.learning.templates.LearningProcess:
  """Example-weighted FedAvg whose `next` takes shard datasets: the same
  process as `build_weighted_fed_avg`, with `build_shard_client_work`."""

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_model_weights_fn.type_signature.result
  aggregator = tff.aggregators.MeanFactory().create(
      weights_type.trainable, tff.TensorType(np.float32))
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn,
      tff.learning.templates.build_broadcast_process(weights_type),
      build_shard_client_work(model_fn, client_optimizer),
      aggregator,
      tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                             weights_type))
