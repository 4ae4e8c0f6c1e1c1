"""FedAwS (paper 000, Algorithm 1): positive-only clients, server spreadout.

A round, for clients that each hold the points of their own class(es):
1. Every client computes its keys, the distinct labels of its data (padded to
   `rows_per_client` by repeating the first), and receives the instance tower
   and *only those rows* of the class table (`tff.federated_select`).
2. It runs SGD on the positive squared hinge max(0, margin - cos(g(x), w_y))^2
   (eq. 23) over its data, and returns the tower delta, its row deltas and keys.
3. The server adds the example-weighted mean tower delta (times the server
   learning rate), adds to each row the mean delta of the clients that held it
   (rows nobody held are untouched), and then takes the spreadout step on the
   updated classes (losses/class_spreadout.py) with learning rate lambda * eta.

The same builder gives two baselines of the paper: `positive_only` (no
spreadout step: the embeddings collapse) and `fixed_class_embeddings` (rows
downloaded but never trained or uploaded). The third, `softmax_oracle` (full
softmax, the whole table sent to every client), is FedAvg over the Keras XC
classifier (`build_softmax_oracle`).

The process has the `tff.learning.templates.LearningProcess` shape, and its
model weights are the tower's weights then the class table, in the order of
`xc_encoder.build_xc_classifier`'s trainable variables.
"""

import dataclasses
from typing import List, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import optimizers
from fed_retrieval.models import scoring
from fed_retrieval.models import xc_encoder
from fed_retrieval.models.xc_encoder import XCEncoderConfig
from losses import class_spreadout

ALGORITHMS = ("fedaws", "positive_only", "fixed_class_embeddings", "softmax_oracle")
FLOAT_BYTES = 4


@dataclasses.dataclass(frozen=True)
class FedAwSConfig:
  """Hyper-parameters of FedAwS and its baselines (names follow the flags).

  Defaults: the paper's k 10 and client SGD as in Algorithm 1; the averaged
  tower delta goes through server Adam (plain averaging, server SGD at 1.0,
  learned nothing in 30 rounds here). lambda is 0.1, not the paper's 10: the
  step is lambda * eta times the gradient of a sum over k neighbours of unit
  rows (up to 2k per row), and at eta 0.2 lambda 10 moves a row by ~40 units
  a round; validation P@1 after 60 rounds on xc_small was 0.13 / 0.35 / 0.46
  at lambda 10 / 0.5 / 0.1 (README).
  """
  algorithm: str = "fedaws"
  client_learning_rate: float = 0.2
  server_optimizer: str = "adam"
  server_learning_rate: float = 0.03
  hinge_margin: float = 0.9
  spreadout: str = "topk"
  spreadout_k: int = 10
  spreadout_lambda: float = 0.1
  spreadout_margin: float = 1.0
  rows_per_client: int = 1

  def __post_init__(self):
    if self.algorithm not in ALGORITHMS:
      raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)} for the "
                       f"XC task, got '{self.algorithm}'")
    if self.spreadout not in class_spreadout.SPREADOUT_MODES:
      raise ValueError(f"--spreadout must be one of "
                       f"{', '.join(class_spreadout.SPREADOUT_MODES)}, got "
                       f"'{self.spreadout}'")
    for name in ("spreadout_k", "rows_per_client"):
      if getattr(self, name) < 1:
        raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")

  @property
  def trains_rows(self) -> bool:
    return self.algorithm != "fixed_class_embeddings"

  @property
  def spreads_out(self) -> bool:
    return self.algorithm == "fedaws"


def _tensor_type(shape, dtype=np.float32) -> tff.TensorType:
  return tff.TensorType(dtype, shape)


def _sgd_step(weight: tf.Tensor, grad, learning_rate: float) -> tf.Tensor:
  if isinstance(grad, tf.IndexedSlices):  # Embedding rows: keep the update sparse.
    return tf.tensor_scatter_nd_sub(weight, grad.indices[:, None],
                                    learning_rate * grad.values)
  return weight - learning_rate * grad


def client_keys(labels: tf.Tensor, rows_per_client: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """(keys [R], is_real [R]): the distinct labels, padded by repeating the first."""
  distinct, _ = tf.unique(labels)
  count = tf.minimum(tf.size(distinct), rows_per_client)
  padded = tf.concat([distinct, tf.fill([rows_per_client], distinct[0])], 0)
  return (tf.reshape(padded[:rows_per_client], [rows_per_client]),
          tf.range(rows_per_client) < count)


def positive_hinge_loss(instance_embeddings: tf.Tensor, rows: tf.Tensor,
                        positions: tf.Tensor, margin: float) -> tf.Tensor:
  """Mean of max(0, margin - cos(instance, its class row))^2 (eq. 23).

  The client's candidate set is the rows it holds; each instance is scored
  against its own row (`positions`: the row of its label).
  """
  cosine = scoring.candidate_scores(instance_embeddings, scoring.l2_normalize(rows),
                                    positions[:, None])[:, 0]
  return tf.reduce_mean(tf.square(tf.maximum(margin - cosine, 0.0)))


def local_training(tower: List[tf.Tensor], rows: tf.Tensor, keys: tf.Tensor,
                   dataset: tf.data.Dataset, config: FedAwSConfig):
  """SGD over the client's batches; returns (tower, rows, loss sum, examples)."""

  def step(state, batch):
    weights, current_rows, loss_sum, count = state
    (feature_ids, feature_values), labels = batch
    positions = tf.argmax(tf.cast(tf.equal(labels[:, None], keys[None, :]), tf.int32),
                          axis=1)
    weights = list(weights)  # tf.data packs lists: the state holds a tuple.
    with tf.GradientTape() as tape:
      tape.watch(weights + [current_rows])
      embeddings = xc_encoder.tower_forward(weights, feature_ids, feature_values)
      loss = positive_hinge_loss(embeddings, current_rows, positions,
                                 config.hinge_margin)
    grads = tape.gradient(loss, weights + [current_rows])
    weights = tuple(_sgd_step(w, g, config.client_learning_rate)
                    for w, g in zip(weights, grads[:-1]))
    if config.trains_rows:
      current_rows = _sgd_step(current_rows, grads[-1], config.client_learning_rate)
    examples = tf.cast(tf.shape(labels)[0], tf.float32)
    return weights, current_rows, loss_sum + loss * examples, count + examples

  return dataset.reduce((tuple(tower), rows, tf.constant(0.0), tf.constant(0.0)), step)


def _add_rows(table: tf.Tensor, counts: tf.Tensor, keys: tf.Tensor, deltas: tf.Tensor,
              is_real: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  keys = tf.boolean_mask(keys, is_real)[:, None]
  return (tf.tensor_scatter_nd_add(table, keys, tf.boolean_mask(deltas, is_real)),
          tf.tensor_scatter_nd_add(counts, keys, tf.ones(tf.shape(keys)[0])))


def apply_row_updates(table: tf.Tensor, delta_sums: tf.Tensor,
                      holders: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
  """(table + per-row mean delta over the clients that held the row, updated ids)."""
  updated = tf.cast(tf.where(holders > 0)[:, 0], tf.int32)
  mean = delta_sums / tf.maximum(holders, 1.0)[:, None]
  return table + mean, updated


def bytes_per_client(model_config: XCEncoderConfig, config: FedAwSConfig
                     ) -> Tuple[int, int]:
  """(download, upload) bytes of one client in one round, from the shapes."""
  tower = sum(int(np.prod(s)) for s in model_config.weight_shapes())
  rows = config.rows_per_client * model_config.embedding_dim
  if config.algorithm == "softmax_oracle":
    table = model_config.num_labels * model_config.embedding_dim
    return FLOAT_BYTES * (tower + table), FLOAT_BYTES * (tower + table)
  down = FLOAT_BYTES * (tower + rows)
  up = FLOAT_BYTES * tower + (FLOAT_BYTES * (rows + 2 * config.rows_per_client)
                              if config.trains_rows else 0)
  return down, up + 2 * FLOAT_BYTES  # + loss sum and example count


def build_fedaws_process(model_config: XCEncoderConfig, config: FedAwSConfig,
                         max_features: int, seed: int = 0
                         ) -> tff.learning.templates.LearningProcess:
  """FedAwS, `positive_only` or `fixed_class_embeddings` as a LearningProcess."""
  if config.algorithm == "softmax_oracle":
    raise ValueError("softmax_oracle is FedAvg: use build_softmax_oracle")
  shapes = model_config.weight_shapes()
  num_classes, dim = model_config.num_labels, model_config.embedding_dim
  rows_per_client = config.rows_per_client
  tower_type = tff.StructWithPythonType([_tensor_type(s) for s in shapes], list)
  table_type = _tensor_type([num_classes, dim])
  batch_type = ((_tensor_type([None, max_features], np.int32),
                 _tensor_type([None, max_features])), _tensor_type([None], np.int32))
  data_type = tff.SequenceType(batch_type)
  initial_tower = xc_encoder.initial_tower_weights(model_config, seed)
  initial_table = xc_encoder.initial_class_table(model_config, seed)

  server_optimizer = optimizers.tff_optimizer(
      config.server_optimizer, config.server_learning_rate, "server_optimizer")
  tower_specs = [tf.TensorSpec(s, tf.float32) for s in shapes]

  @tff.tensorflow.computation
  def initial_state():
    return {"tower": [tf.constant(w) for w in initial_tower],
            "table": tf.constant(initial_table),
            "optimizer": server_optimizer.initialize(tower_specs)}

  state_type = initial_state.type_signature.result

  @tff.federated_computation
  def initialize():
    return tff.federated_eval(initial_state, tff.SERVER)

  @tff.tensorflow.computation(data_type)
  def keys_of(dataset):
    labels = dataset.map(lambda x, y: y).unbatch().batch(2 ** 31 - 1)
    return client_keys(labels.get_single_element(), rows_per_client)

  @tff.tensorflow.computation(table_type, _tensor_type([], np.int32))
  def select_row(table, key):
    return tf.gather(table, key)

  @tff.tensorflow.computation(tower_type, tff.SequenceType(_tensor_type([dim])),
                              _tensor_type([rows_per_client], np.int32), data_type)
  def client_update(tower, row_dataset, keys, dataset):
    rows = tf.reshape(row_dataset.batch(rows_per_client).get_single_element(),
                      [rows_per_client, dim])
    new_tower, new_rows, loss_sum, count = local_training(tower, rows, keys, dataset,
                                                          config)
    return ([n - o for n, o in zip(new_tower, tower)], new_rows - rows, loss_sum,
            count)

  row_update_type = (_tensor_type([rows_per_client], np.int32),
                     _tensor_type([rows_per_client, dim]),
                     _tensor_type([rows_per_client], np.bool_))

  @tff.tensorflow.computation
  def zero_rows():
    return tf.zeros([num_classes, dim]), tf.zeros([num_classes])

  accumulator_type = zero_rows.type_signature.result

  @tff.tensorflow.computation(accumulator_type, row_update_type)
  def accumulate_rows(accumulator, update):
    keys, deltas, is_real = update
    return _add_rows(accumulator[0], accumulator[1], keys, deltas, is_real)

  @tff.tensorflow.computation(accumulator_type, accumulator_type)
  def merge_rows(a, b):
    return a[0] + b[0], a[1] + b[1]

  @tff.tensorflow.computation(accumulator_type)
  def report_rows(accumulator):
    return accumulator

  @tff.tensorflow.computation(state_type, tower_type, accumulator_type)
  def server_update(state, mean_tower_delta, row_sums):
    optimizer_state, tower = server_optimizer.next(
        state["optimizer"], list(state["tower"]), [-d for d in mean_tower_delta])
    table, updated = apply_row_updates(state["table"], row_sums[0], row_sums[1])
    if config.spreads_out:
      table = class_spreadout.spreadout_step(
          table, updated, config.spreadout_lambda * config.client_learning_rate,
          config.spreadout, config.spreadout_k, config.spreadout_margin)
    return {"tower": list(tower), "table": table, "optimizer": optimizer_state}

  @tff.tensorflow.computation(tff.types.StructType([tff.TensorType(np.float32)] * 2))
  def training_metrics(sums):
    loss_sum, count = sums[0], sums[1]
    return {"client_work": {"train": {"loss": loss_sum / tf.maximum(count, 1.0),
                                      "num_examples": count}}}

  @tff.federated_computation(tff.FederatedType(state_type, tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def next_fn(state, client_data):
    keys_and_mask = tff.federated_map(keys_of, client_data)
    keys = keys_and_mask[0]
    rows = tff.federated_select(keys, tff.federated_value(num_classes, tff.SERVER),
                                state["table"], select_row)
    tower = tff.federated_broadcast(state["tower"])
    tower_delta, row_delta, loss_sum, count = tff.federated_map(
        client_update, (tower, rows, keys, client_data))
    mean_tower_delta = tff.federated_mean(tower_delta, weight=count)
    row_sums = tff.federated_aggregate(
        (keys, row_delta, keys_and_mask[1]), zero_rows(), accumulate_rows, merge_rows,
        report_rows)
    new_state = tff.federated_map(server_update, (state, mean_tower_delta, row_sums))
    metrics = tff.federated_map(
        training_metrics, (tff.federated_sum(loss_sum), tff.federated_sum(count)))
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  weights_type = tff.learning.models.ModelWeights(
      trainable=tff.StructWithPythonType(list(tower_type) + [table_type], list),
      non_trainable=tff.StructWithPythonType([], list))

  @tff.tensorflow.computation(state_type)
  def get_model_weights(state):
    return tff.learning.models.ModelWeights(
        trainable=list(state["tower"]) + [state["table"]], non_trainable=[])

  @tff.tensorflow.computation(state_type, weights_type)
  def set_model_weights(state, weights):
    trainable = list(weights.trainable)
    return {"tower": trainable[:-1], "table": trainable[-1],
            "optimizer": state["optimizer"]}

  return tff.learning.templates.LearningProcess(initialize, next_fn, get_model_weights,
                                                set_model_weights)


def build_softmax_oracle(model_config: XCEncoderConfig, config: FedAwSConfig,
                         max_features: int, seed: int = 0
                         ) -> tff.learning.templates.LearningProcess:
  """FedAvg with full softmax over every class (the whole table goes both ways).

  The same client SGD and server step as FedAwS's tower, so the methods differ
  only in what the clients see.
  """

  def model_fn() -> tff.learning.models.VariableModel:
    return tff.learning.models.from_keras_model(
        xc_encoder.build_xc_classifier(model_config, seed),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=((tf.TensorSpec([None, max_features], tf.int32),
                     tf.TensorSpec([None, max_features], tf.float32)),
                    tf.TensorSpec([None], tf.int32)))

  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn,
      client_optimizer_fn=optimizers.tff_optimizer(
          "sgd", config.client_learning_rate, "client_optimizer"),
      server_optimizer_fn=optimizers.tff_optimizer(
          config.server_optimizer, config.server_learning_rate, "server_optimizer"),
      loop_implementation=fedavg.CLIENT_LOOP)


def build_process(model_config: XCEncoderConfig, config: FedAwSConfig,
                  max_features: int, seed: int = 0
                  ) -> tff.learning.templates.LearningProcess:
  """The process of `config.algorithm`."""
  builder = (build_softmax_oracle if config.algorithm == "softmax_oracle"
             else build_fedaws_process)
  return builder(model_config, config, max_features, seed)
