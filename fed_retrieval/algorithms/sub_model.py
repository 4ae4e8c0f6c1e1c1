"""The federated process of a model whose clients each hold a sub-model.

FedAwS and FedSS (and sampled global softmax for MovieLens) share one shape:
the model is a dense part (the "tower": every client receives all of it) and
an embedding table of which each client receives only the rows of its keys.
A round:
1. Every client computes its fixed-size key set from its own data and the
   round (`SubModelSpec.client_keys`, traced as a TFF computation on the
   client), and receives the tower (`federated_broadcast`) and only the rows
   of its keys (`tff.federated_select`), or, with `whole_table`, the table
   itself (full softmax, the reference the sub-models are measured against).
2. It runs SGD on `SubModelSpec.loss` over its data and returns the tower
   delta, its row deltas, its keys and which keys are real (not padding).
3. The server takes a server-optimizer step on the tower with the
   example-weighted mean delta, adds to each row the mean delta of the
   clients that held it (`federated_aggregate`: rows nobody held are
   untouched, and no dense [C, D] value ever reaches a client), then an
   optional step on the whole table (`table_step`, FedAwS's spreadout).

The rows take a plain mean (FedAvg's server step at rate 1), not the server
optimizer: a stateful optimizer (momentum, Adam) would keep moving rows that
no client held this round. Which mean (`row_mean`):
- `holders`: each row's deltas averaged over the clients that held it. A row
  moves as far as its holders moved it, however few: fast where a row's only
  holder is the client of its class, but a row one client sampled as a
  negative takes that client's whole push.
- `clients`: FedAvg's mean over every client of the round, weighted by
  examples, a row's delta counting as zero on clients that did not hold it
  (paper 003: "the same procedure as FedAvg is used for aggregating").

Model weights are the tower's then the table, or the table then the tower's
(`table_first`), in the order of the task's Keras model's trainable variables.
"""

import dataclasses
from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import optimizers

ROW_MEANS = ("holders", "clients")
FLOAT_BYTES = 4
KEY_BYTES = 4
# (dataset, round seed [2] int64: (seed, round)) -> (keys [K] int32, is_real [K] bool).
ClientKeysFn = Callable[[tf.data.Dataset, tf.Tensor], Tuple[tf.Tensor, tf.Tensor]]
# (tower weights, rows [K, D], keys [K], is_real [K], batch) -> scalar loss.
ClientLossFn = Callable[[List[tf.Tensor], tf.Tensor, tf.Tensor, tf.Tensor, Any],
                        tf.Tensor]
# (table [C, D], ids of the rows updated this round) -> table.
TableStepFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


@dataclasses.dataclass(frozen=True)
class SubModelSpec:
  """What a sub-model process needs of an algorithm on a model family."""
  initial_tower: Sequence[np.ndarray]
  initial_table: np.ndarray
  batch_type: Any  # TFF type of one batch: (inputs, labels).
  num_keys: int
  client_keys: Optional[ClientKeysFn]  # None with `whole_table`: every row.
  loss: ClientLossFn
  client_learning_rate: float
  server_optimizer: str = "adam"
  server_learning_rate: float = 0.03
  trains_rows: bool = True
  whole_table: bool = False
  table_step: Optional[TableStepFn] = None
  table_first: bool = False
  row_mean: str = "holders"
  seed: int = 0

  def __post_init__(self):
    if self.num_keys < 1:
      raise ValueError(f"a client's key set must hold >= 1 row, got {self.num_keys}")
    if self.whole_table and self.num_keys != len(self.initial_table):
      raise ValueError("whole_table: the key set is every row "
                       f"({len(self.initial_table)}), got {self.num_keys}")
    if self.row_mean not in ROW_MEANS:
      raise ValueError(f"--row_mean must be one of {', '.join(ROW_MEANS)}, got "
                       f"'{self.row_mean}'")
    if (self.client_keys is None) != self.whole_table:
      raise ValueError("client_keys is needed exactly when clients select rows "
                       "(not whole_table)")


def bytes_per_client(tower_shapes: Sequence[Sequence[int]], num_keys: int, dim: int,
                     trains_rows: bool = True, whole_table: bool = False
                     ) -> Tuple[int, int]:
  """(download, upload) bytes of one client in one round, from the shapes.

  Down: the tower and its rows (`whole_table`: the table). Up: the tower delta,
  loss sum and count; with selected rows also its keys (the request) and, if
  rows train, the row deltas with their keys and real-key mask; with the whole
  table, the table delta.
  """
  tower = FLOAT_BYTES * sum(int(np.prod(s)) for s in tower_shapes)
  rows = FLOAT_BYTES * num_keys * dim
  up = tower + 2 * FLOAT_BYTES
  if whole_table:
    return tower + rows, up + rows
  up += KEY_BYTES * num_keys
  if trains_rows:
    up += rows + 2 * KEY_BYTES * num_keys
  return tower + rows, up


def _tensor_type(shape, dtype=np.float32) -> tff.TensorType:
  return tff.TensorType(dtype, shape)


def sgd_step(weight: tf.Tensor, grad, learning_rate: float) -> tf.Tensor:
  """weight - learning_rate * grad, sparse for embedding rows (IndexedSlices)."""
  if isinstance(grad, tf.IndexedSlices):
    return tf.tensor_scatter_nd_sub(weight, grad.indices[:, None],
                                    learning_rate * grad.values)
  return weight - learning_rate * grad


def local_training(spec: SubModelSpec, tower: Sequence[tf.Tensor], rows: tf.Tensor,
                   keys: tf.Tensor, is_real: tf.Tensor, dataset: tf.data.Dataset):
  """SGD over the client's batches; returns (tower, rows, loss sum, examples)."""

  def step(state, batch):
    weights, current_rows, loss_sum, count = state
    weights = list(weights)  # tf.data packs lists: the state holds a tuple.
    with tf.GradientTape() as tape:
      tape.watch(weights + [current_rows])
      loss = spec.loss(weights, current_rows, keys, is_real, batch)
    grads = tape.gradient(loss, weights + [current_rows])
    weights = tuple(sgd_step(w, g, spec.client_learning_rate)
                    for w, g in zip(weights, grads[:-1]))
    if spec.trains_rows:
      current_rows = sgd_step(current_rows, grads[-1], spec.client_learning_rate)
    examples = tf.cast(tf.shape(batch[1])[0], tf.float32)
    return weights, current_rows, loss_sum + loss * examples, count + examples

  return dataset.reduce((tuple(tower), rows, tf.constant(0.0), tf.constant(0.0)), step)


def add_rows(table: tf.Tensor, counts: tf.Tensor, keys: tf.Tensor, deltas: tf.Tensor,
             is_real: tf.Tensor, weight: float = 1.0) -> Tuple[tf.Tensor, tf.Tensor]:
  """Adds one client's real row deltas (times `weight`) and a holder count to
  the accumulators."""
  keys = tf.boolean_mask(keys, is_real)[:, None]
  return (tf.tensor_scatter_nd_add(table, keys,
                                   weight * tf.boolean_mask(deltas, is_real)),
          tf.tensor_scatter_nd_add(counts, keys, tf.ones(tf.shape(keys)[0])))


def apply_row_updates(table: tf.Tensor, delta_sums: tf.Tensor, holders: tf.Tensor,
                      total_weight=None) -> Tuple[tf.Tensor, tf.Tensor]:
  """(table + mean delta, updated ids): the per-row mean over the clients that
  held the row, or, given `total_weight`, the sum over that total (the mean
  over every client of weighted deltas)."""
  updated = tf.cast(tf.where(holders > 0)[:, 0], tf.int32)
  divisor = (tf.maximum(holders, 1.0)[:, None] if total_weight is None
             else tf.maximum(total_weight, 1e-12))
  return table + delta_sums / divisor, updated


def build_sub_model_process(spec: SubModelSpec
                            ) -> tff.learning.templates.LearningProcess:
  """The spec's algorithm as a `tff.learning.templates.LearningProcess`."""
  shapes = [tuple(w.shape) for w in spec.initial_tower]
  num_rows, dim = spec.initial_table.shape
  num_keys = spec.num_keys
  tower_type = tff.StructWithPythonType([_tensor_type(s) for s in shapes], list)
  table_type = _tensor_type([num_rows, dim])
  keys_type = _tensor_type([num_keys], np.int32)
  data_type = tff.SequenceType(spec.batch_type)
  initial_tower = [np.asarray(w, np.float32) for w in spec.initial_tower]
  initial_table = np.asarray(spec.initial_table, np.float32)
  server_optimizer = optimizers.tff_optimizer(
      spec.server_optimizer, spec.server_learning_rate, "server_optimizer")
  tower_specs = [tf.TensorSpec(s, tf.float32) for s in shapes]

  @tff.tensorflow.computation
  def initial_state():
    return {"tower": [tf.constant(w) for w in initial_tower],
            "table": tf.constant(initial_table),
            "optimizer": server_optimizer.initialize(tower_specs),
            "round": tf.constant(0, tf.int64)}

  state_type = initial_state.type_signature.result

  @tff.federated_computation
  def initialize():
    return tff.federated_eval(initial_state, tff.SERVER)

  @tff.tensorflow.computation(state_type)
  def round_seed(state):
    """(seed, the round about to run), as the clients' key functions get it."""
    return tf.stack([tf.constant(spec.seed, tf.int64), state["round"] + 1])

  if spec.whole_table:
    @tff.tensorflow.computation
    def every_row():
      return tf.range(num_rows), tf.ones([num_rows], tf.bool)
  else:
    @tff.tensorflow.computation(data_type, _tensor_type([2], np.int64))
    def keys_of(dataset, seed):
      keys, is_real = spec.client_keys(dataset, seed)
      return (tf.reshape(tf.cast(keys, tf.int32), [num_keys]),
              tf.reshape(is_real, [num_keys]))

  @tff.tensorflow.computation(table_type, _tensor_type([], np.int32))
  def select_row(table, key):
    return tf.gather(table, key)

  rows_type = table_type if spec.whole_table else tff.SequenceType(_tensor_type([dim]))

  @tff.tensorflow.computation(tower_type, rows_type, keys_type,
                              _tensor_type([num_keys], np.bool_), data_type)
  def client_update(tower, received_rows, keys, is_real, dataset):
    if spec.whole_table:
      rows = received_rows
    else:
      rows = tf.reshape(received_rows.batch(num_keys).get_single_element(),
                        [num_keys, dim])
    new_tower, new_rows, loss_sum, count = local_training(spec, tower, rows, keys,
                                                          is_real, dataset)
    return ([n - o for n, o in zip(new_tower, tower)], new_rows - rows, loss_sum,
            count)

  row_update_type = (keys_type, _tensor_type([num_keys, dim]),
                     _tensor_type([num_keys], np.bool_), _tensor_type([]))
  weighted = spec.row_mean == "clients"

  @tff.tensorflow.computation
  def zero_rows():
    return tf.zeros([num_rows, dim]), tf.zeros([num_rows]), tf.constant(0.0)

  accumulator_type = zero_rows.type_signature.result

  @tff.tensorflow.computation(accumulator_type, row_update_type)
  def accumulate_rows(accumulator, update):
    keys, deltas, is_real, examples = update
    weight = examples if weighted else 1.0
    sums, holders = add_rows(accumulator[0], accumulator[1], keys, deltas, is_real,
                             weight)
    return sums, holders, accumulator[2] + weight

  @tff.tensorflow.computation(accumulator_type, accumulator_type)
  def merge_rows(a, b):
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]

  @tff.tensorflow.computation(accumulator_type)
  def report_rows(accumulator):
    return accumulator

  @tff.tensorflow.computation(state_type, tower_type, accumulator_type)
  def server_update(state, mean_tower_delta, row_sums):
    optimizer_state, tower = server_optimizer.next(
        state["optimizer"], list(state["tower"]), [-d for d in mean_tower_delta])
    table = state["table"]
    if spec.trains_rows:
      table, updated = apply_row_updates(table, row_sums[0], row_sums[1],
                                         row_sums[2] if weighted else None)
      if spec.table_step is not None:
        table = spec.table_step(table, updated)
    return {"tower": list(tower), "table": table, "optimizer": optimizer_state,
            "round": state["round"] + 1}

  @tff.tensorflow.computation(tff.types.StructType([tff.TensorType(np.float32)] * 2))
  def training_metrics(sums):
    loss_sum, count = sums[0], sums[1]
    return {"client_work": {"train": {"loss": loss_sum / tf.maximum(count, 1.0),
                                      "num_examples": count}}}

  @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, client_data):
    if spec.whole_table:  # Every client holds every row: no keys to compute.
      keys_and_mask = tff.federated_eval(every_row, tff.CLIENTS)
      rows = tff.federated_broadcast(state["table"])
    else:
      seed = tff.federated_broadcast(tff.federated_map(round_seed, state))
      keys_and_mask = tff.federated_map(keys_of, (client_data, seed))
      rows = tff.federated_select(keys_and_mask[0],
                                  tff.federated_value(num_rows, tff.SERVER),
                                  state["table"], select_row)
    keys, is_real = keys_and_mask[0], keys_and_mask[1]
    tower = tff.federated_broadcast(state["tower"])
    tower_delta, row_delta, loss_sum, count = tff.federated_map(
        client_update, (tower, rows, keys, is_real, client_data))
    mean_tower_delta = tff.federated_mean(tower_delta, weight=count)
    row_sums = tff.federated_aggregate(
        (keys, row_delta, is_real, count), zero_rows(), accumulate_rows, merge_rows,
        report_rows)
    new_state = tff.federated_map(server_update, (state, mean_tower_delta, row_sums))
    metrics = tff.federated_map(
        training_metrics, (tff.federated_sum(loss_sum), tff.federated_sum(count)))
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  member_types = ([table_type] + list(tower_type) if spec.table_first
                  else list(tower_type) + [table_type])
  weights_type = tff.learning.models.ModelWeights(
      trainable=tff.StructWithPythonType(member_types, list),
      non_trainable=tff.StructWithPythonType([], list))

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    tower = list(state["tower"])
    trainable = ([state["table"]] + tower if spec.table_first
                 else tower + [state["table"]])
    return tff.learning.models.ModelWeights(trainable=trainable, non_trainable=[])

  @tff.tensorflow.computation(state_type, weights_type)
  def set_model_weights(state, weights):
    trainable = list(weights.trainable)
    table, tower = ((trainable[0], trainable[1:]) if spec.table_first
                    else (trainable[-1], trainable[:-1]))
    return {"tower": tower, "table": table, "optimizer": state["optimizer"],
            "round": state["round"]}

  return tff.learning.templates.LearningProcess(initialize, next_fn, get_model_weights,
                                                set_model_weights)
