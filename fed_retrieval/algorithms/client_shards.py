"""FedAvg and FedSGD with many simulated clients in each TFF client call.

TFF runs one client computation per CLIENTS value. With 100 small clients a
round (MovieLens users: ~9 batches each), what each call costs around the
client's training (its dataset serialized, sent to the worker, rebuilt, a
graph run, the result sent back: ~4 ms here) outweighs the training itself.
Here a TFF client is a shard of simulated clients: its dataset is one
`tasks.client_data.Shard`, their examples one client after another with
where each batch ends and which batches start a client
(`ClientDatasets.shard_dataset`). A while loop over the clients, and in each
over its batches, slices each batch from those tensors (a dataset element a
batch cost ~0.06 ms to fetch, as much as a small step). The shard computes
each client's update from the round's model as the algorithm does and
returns the example-weighted mean of their updates with their total weight:
- FedAvg: the client trains with a fresh client optimizer; its update is the
  round's weights minus its trained ones. Plain SGD steps in place
  (`optimizers.sgd_in_place`: only the embedding rows a batch touches are
  written; TFF's SGD writes whole tables);
- FedSGD: the client's update is its example-weighted mean gradient at the
  round's model (no local step).
A batch's step can be compiled with XLA (`jit_compile`, off by default: once
full batches had static shapes it made no loss's rounds faster on this CPU).
TFF's weighted mean over the shards is then the algorithm's over the clients:
  sum_s W_s (sum_{k in s} n_k u_k / W_s) / sum_s W_s = sum_k n_k u_k / sum_k n_k.
A client whose update is not finite counts with weight 0 (zeroed), as in
TFF's own client work. The processes are composed from TFF's templates with
the stock broadcast, weighted mean and server-optimizer finalizer, so their
state and `get_model_weights` are those of
`tff.learning.algorithms.build_weighted_fed_avg` and `build_fed_sgd`
(a checkpoint of either resumes).
What a shard cannot do: a per-client aggregator (client-level DP clips each
client's update; a shard's mean is not one client's), so DP runs keep one
TFF client per client.
"""

import dataclasses
from typing import Any, Callable, Dict, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import optimizers
from tasks import client_data

ModelFn = Callable[[], tff.learning.models.VariableModel]
Optimizer = tff.learning.optimizers.Optimizer


@dataclasses.dataclass(frozen=True)
class ModelTypes:
  """What a client work needs of a model besides building it in its own
  computation: the weights' TFF type, the batches' spec, metric finalizers
  (`build_sharded_process` takes them from the model of its initial weights)."""
  weights_type: Any
  input_spec: Any
  metric_finalizers: Dict[str, Callable]


def _shard_update_fn(model: tff.learning.models.VariableModel,
                     client_optimizer: Optional[Optimizer], jit_compile: bool = False,
                     batch_size: Optional[int] = None):
  """A tf.function: (client optimizer hparams, the round's weights, a shard's
  dataset) -> (ClientResult of the shard, its clients' summed metrics).
  With `client_optimizer` each client trains (FedAvg); with None each client
  reports its mean gradient (FedSGD, whose hparams are `()`). Each batch's
  step is compiled with XLA when `jit_compile`; with `batch_size`, a full
  batch's step is the graph of that static size. Loops are `tf.while_loop`s
  and autograph is off: converting these functions and all they call was
  ~4 of the ~10 s a fresh process took to build the process."""
  local_steps = client_optimizer is not None
  trainable = tuple(model.trainable_variables)
  # The forward pass traced into the step's graph, not called as a graph of
  # its own, whose gradient TF would take through a second function: a
  # batch-softmax shard 0.967 of its time with `from_keras_model` (one-off
  # script; `variable_model` 0.947). The same ops, the same weights.
  forward_pass = getattr(model.forward_pass, "python_function", model.forward_pass)

  @tf.function(jit_compile=jit_compile, autograph=False)
  def train_batch(batch, carry):
    """One batch of a client: (carry, its examples). FedAvg's carry is the
    client optimizer's state (plain SGD steps in place), FedSGD's the client's
    example-weighted gradient sum."""
    with tf.GradientTape() as tape:
      output = forward_pass(batch, training=True)
    gradients = tape.gradient(output.loss, trainable,
                              unconnected_gradients=tf.UnconnectedGradients.ZERO)
    if not local_steps:
      examples = tf.cast(output.num_examples, tf.float32)
      carry = tuple(optimizers.add_scaled(total, g, examples)
                    for total, g in zip(carry, gradients))
    elif optimizers.steps_in_place(carry):
      optimizers.sgd_in_place(trainable, gradients, carry["learning_rate"])
    else:
      carry, updated = client_optimizer.next(carry, trainable, tuple(gradients))
      for v, t in zip(trainable, updated):
        v.assign(t)
    return carry, tf.cast(output.num_examples, tf.int64)

  @tf.function(autograph=False)
  def shard_update(hparams, initial_weights, dataset):
    shard = client_data.read_shard(dataset)
    weights = tff.learning.models.ModelWeights.from_model(model)
    tf.nest.map_structure(lambda v, t: v.assign(t), weights, initial_weights)
    # Tuples throughout: autograph would stack a list carried through the loop.
    initial = tuple(tf.nest.flatten(initial_weights.trainable))
    specs = tuple(tf.TensorSpec(v.shape, v.dtype) for v in trainable)
    zeros = lambda: tuple(tf.zeros_like(t) for t in initial)

    def fresh_carry():
      """`train_batch`'s carry at a client's start: a fresh client optimizer
      (FedAvg) or a zero gradient sum (FedSGD)."""
      if local_steps:
        return client_optimizer.set_hparams(client_optimizer.initialize(specs), hparams)
      return zeros()

    def add_client(total_update, total_weight, carry, client_examples):
      """Adds the client just done (weight 0 if its update is not finite)
      and puts the round's model back for the next one."""
      weight = tf.cast(client_examples, tf.float32)
      if local_steps:
        update = tuple(i - v for i, v in zip(initial, trainable))
      else:
        update = tuple(g / weight for g in carry)
      finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(u)) for u in update])
      total_update = tf.cond(
          finite, lambda: tuple(total + u * weight for total, u in zip(total_update, update)),
          lambda: total_update)
      weight = tf.where(finite, weight, 0.0)
      for v, t in zip(trainable, initial):
        v.assign(t)
      return total_update, total_weight + weight

    # A while loop over the clients, and in each over its batches, sliced from
    # the shard's tensors: no dataset element to fetch a batch (~0.06 ms each
    # here, as much as a small step), and no test at every batch of whether a
    # client starts (batch softmax FedAvg: the worker's CPU a round 102 -> 94
    # ms without it).
    if batch_size:
      shard = client_data.checked_shard(shard, batch_size)
    client_batches = client_data.shard_client_batches(shard)

    def train_client(client, total_update, total_weight):
      """Trains client `client` from the round's model and adds its update.
      Every batch of a client but its last is full: with `batch_size`
      those are sliced with that static size, so their step's graph knows
      every shape, and the last, of any length, takes a graph of its own
      (batch softmax: a shard of 923 batches in-process 73 -> 53 ms, the
      worker's CPU a round 92-94 -> 76-85 ms; global softmax's XLA steps:
      rounds 462 -> 359 ms)."""
      first, last = client_batches[client], client_batches[client + 1]
      full_end = last - 1 if batch_size else last

      def train_full_batch(index, carry, client_examples):
        carry, examples = train_batch(client_data.shard_batch(shard, index, batch_size),
                                      carry)
        return index + 1, carry, client_examples + examples

      _, carry, client_examples = tf.while_loop(
          lambda index, carry, client_examples: index < full_end, train_full_batch,
          (first, fresh_carry(), tf.constant(0, tf.int64)))
      if batch_size:
        carry, examples = train_batch(client_data.shard_batch(shard, last - 1), carry)
        client_examples += examples
      return (client + 1, *add_client(total_update, total_weight, carry, client_examples))

    clients = tf.size(client_batches) - 1
    _, total_update, total_weight = tf.while_loop(
        lambda client, total_update, total_weight: client < clients, train_client,
        (tf.constant(0), zeros(), tf.constant(0.0)))
    mean_update = tf.nest.pack_sequence_as(
        initial_weights.trainable,
        [tf.math.divide_no_nan(u, total_weight) for u in total_update])
    return (tff.learning.templates.ClientResult(update=mean_update,
                                                update_weight=total_weight),
            model.report_local_unfinalized_metrics())

  return shard_update


def build_shard_client_work(model_fn: ModelFn, types: ModelTypes,
                            client_optimizer: Optional[Optimizer],
                            jit_compile: bool = False, batch_size: Optional[int] = None
                            ) -> tff.learning.templates.ClientWorkProcess:
  """The client work of FedAvg (example-weighted; `client_optimizer` trains
  each client) or FedSGD (None) over shards of clients: each CLIENTS value is
  a `shard_dataset` (of batches of at most `batch_size`, when given: the full
  ones train on static shapes), `types` those of `model_fn`'s model. Its state
  is FedAvg's client optimizer hparams, or FedSGD's `()`, as in TFF's client
  works."""
  metrics_aggregation = tff.learning.metrics.sum_then_finalize(types.metric_finalizers)
  data_type = tff.SequenceType(tff.types.tensorflow_to_type(
      client_data.shard_spec(types.input_spec)))
  weights_type = types.weights_type
  hparams = (() if client_optimizer is None else client_optimizer.get_hparams(
      client_optimizer.initialize(tf.TensorSpec([], tf.float32))))

  @tff.federated_computation
  def init_fn():
    return tff.federated_value(hparams, tff.SERVER)

  state_type = init_fn.type_signature.result.member

  @tff.tensorflow.computation(state_type, weights_type, data_type)
  def shard_update(state, initial_weights, dataset):
    return _shard_update_fn(model_fn(), client_optimizer, jit_compile, batch_size)(
        state, initial_weights, dataset)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(weights_type, tff.CLIENTS),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, weights, shards):
    results, metrics = tff.federated_map(
        shard_update, (tff.federated_broadcast(state), weights, shards))
    measurements = tff.federated_zip({"train": metrics_aggregation(metrics)})
    return tff.templates.MeasuredProcessOutput(state, results, measurements)

  if client_optimizer is None:
    return tff.learning.templates.ClientWorkProcess(init_fn, next_fn)

  @tff.tensorflow.computation(state_type)
  def get_hparams_fn(state):
    return state

  @tff.tensorflow.computation(state_type, state_type)
  def set_hparams_fn(state, new_hparams):
    del state
    return new_hparams

  return tff.learning.templates.ClientWorkProcess(
      init_fn, next_fn, get_hparams_fn=get_hparams_fn, set_hparams_fn=set_hparams_fn)


def build_sharded_process(model_fn: ModelFn, server_optimizer: Optimizer,
                          client_optimizer: Optional[Optimizer] = None,
                          jit_compile: bool = False, batch_size: Optional[int] = None
                          ) -> tff.learning.templates.LearningProcess:
  """Example-weighted FedAvg (with `client_optimizer`) or FedSGD (without)
  whose `next` takes shard datasets: the same process as
  `build_weighted_fed_avg` or `build_fed_sgd`, with `build_shard_client_work`
  (each batch's step compiled with XLA when `jit_compile`; full batches of
  `batch_size` on static shapes). The model built for the initial weights
  also gives the client work its types: a third build, in a graph of its own,
  was 0.6 of the 2.0 s a warm process build took (small MovieLens preset)."""
  built = {}

  @tff.tensorflow.computation
  def initial_model_weights_fn():
    model = model_fn()
    built["types"] = (model.input_spec, model.metric_finalizers())
    return tff.learning.models.ModelWeights.from_model(model)

  weights_type = initial_model_weights_fn.type_signature.result
  types = ModelTypes(weights_type, *built["types"])
  aggregator = tff.aggregators.MeanFactory().create(
      weights_type.trainable, tff.TensorType(np.float32))
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn,
      tff.learning.templates.build_broadcast_process(weights_type),
      build_shard_client_work(model_fn, types, client_optimizer, jit_compile, batch_size),
      aggregator,
      tff.learning.templates.build_apply_optimizer_finalizer(server_optimizer,
                                                             weights_type))
