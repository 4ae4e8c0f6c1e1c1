"""One federated round of FedAvg and FedSGD against a hand computation."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import optimizers
from fed_retrieval.algorithms.fedavg import FedAvgConfig
from fed_retrieval.training.loop_config import LoopConfig
from losses.registry import ObjectiveConfig
from tasks import client_data
from tests.configs import fedavg_and_loop
from tests.linear_clients import CLIENT_A, CLIENT_B, CLIENT_NAN, W0, dataset
from tests.linear_clients import linear_model_fn, mse_gradient


def shard(clients, batch_size=None):
  """One shard dataset of `clients`, each in batches (default: one batch)."""
  inputs = np.concatenate([c[0] for c in clients])
  labels = np.concatenate([c[1] for c in clients])
  points, start = {}, 0
  for i, (_, y) in enumerate(clients):
    points[str(i)] = np.arange(start, start + len(y))
    start += len(y)
  data = client_data.ClientDatasets(inputs, labels, points)
  return data.shard_dataset([str(i) for i in range(len(clients))],
                            batch_size or max(len(c[1]) for c in clients), 1,
                            [None] * len(clients))


def run_round(config, clients, shards=None, process=None):
  """The weights after one round on `clients` (each one batch), or with
  `client_shards`, on `shards` (lists of clients); `process`: the one `config`
  builds, built already."""
  process = process or fedavg.build_learning_process(linear_model_fn, *config)
  state = process.initialize()
  data = ([shard(s) for s in shards] if shards else [dataset(c) for c in clients])
  output = process.next(state, data)
  return np.asarray(process.get_model_weights(output.state).trainable[0]).reshape(2)


@pytest.mark.parametrize("shards,weights", [
    (None, {"a": 2, "b": 1}),  # A TFF client each.
    ([[CLIENT_A, CLIENT_B], [CLIENT_A]], {"a": 2 + 2, "b": 1}),  # Three in two shards.
])
def test_fedavg_round_matches_hand_computation(tff_context, shards, weights):
  config = fedavg_and_loop(algorithm="fedavg", client_learning_rate=0.1,
                           server_optimizer="sgd", server_learning_rate=0.5,
                           client_shards=len(shards or []))
  # Each client takes one SGD step on its single batch from the round's model;
  # the server averages the deltas weighted by examples and applies them at 0.5.
  delta_a = -0.1 * mse_gradient(W0, CLIENT_A)
  delta_b = -0.1 * mse_gradient(W0, CLIENT_B)
  expected = W0 + 0.5 * (weights["a"] * delta_a + weights["b"] * delta_b) / (
      weights["a"] + weights["b"])
  np.testing.assert_allclose(run_round(config, [CLIENT_A, CLIENT_B], shards), expected,
                             rtol=1e-5)


def test_sharded_fedavg_equals_fedavg_with_momentum_and_several_steps(tff_context):
  # Two batches a client and client momentum: the optimizer restarts per client.
  clients = [(np.array([[1, 0], [0, 1], [1, 1]], np.float32),
              np.array([1, 2, 0], np.float32)), CLIENT_B,
             (np.array([[0, 2], [1, -1]], np.float32), np.array([3, 1], np.float32))]
  config = fedavg_and_loop(algorithm="fedavg", client_optimizer="sgdm",
                           client_learning_rate=0.1, server_optimizer="sgd",
                           server_learning_rate=1.0, client_shards=0, batch_size=2)
  process = fedavg.build_learning_process(linear_model_fn, *config)
  stock = process.next(process.initialize(), [
      tf.data.Dataset.from_tensor_slices(c).batch(2) for c in clients])
  sharded_process = fedavg.build_learning_process(
      linear_model_fn, config[0], dataclasses.replace(config[1], client_shards=2))
  sharded = sharded_process.next(sharded_process.initialize(),
                                 [shard(clients[:2], 2), shard(clients[2:], 2)])
  np.testing.assert_allclose(
      sharded_process.get_model_weights(sharded.state).trainable[0],
      process.get_model_weights(stock.state).trainable[0], rtol=1e-6)
  assert (sharded.metrics["client_work"]["train"]["num_examples"] ==
          stock.metrics["client_work"]["train"]["num_examples"] == 6)


@pytest.mark.parametrize("shards,weights", [
    (None, {"a": 2, "b": 1}),  # A TFF client each.
    ([[CLIENT_A, CLIENT_B], [CLIENT_A]], {"a": 2 + 2, "b": 1}),  # Three in two shards.
])
def test_fedsgd_round_matches_hand_computation(tff_context, shards, weights):
  config = fedavg_and_loop(algorithm="fedsgd", server_optimizer="sgd",
                           server_learning_rate=0.3, client_shards=len(shards or []))
  # The server steps along the example-weighted mean of the clients' gradients.
  gradient = (weights["a"] * mse_gradient(W0, CLIENT_A) +
              weights["b"] * mse_gradient(W0, CLIENT_B)) / (weights["a"] + weights["b"])
  np.testing.assert_allclose(run_round(config, [CLIENT_A, CLIENT_B], shards),
                             W0 - 0.3 * gradient, rtol=1e-5)


def test_sharded_fedsgd_equals_fedsgd_over_several_batches(tff_context):
  # Batches of 2: a client's gradient is its batches' weighted by their examples.
  clients = [(np.array([[1, 0], [0, 1], [1, 1]], np.float32),
              np.array([1, 2, 0], np.float32)), CLIENT_B,
             (np.array([[0, 2], [1, -1]], np.float32), np.array([3, 1], np.float32))]
  config = fedavg_and_loop(algorithm="fedsgd", server_optimizer="adam",
                           server_learning_rate=0.1, client_shards=0, batch_size=2)
  process = fedavg.build_learning_process(linear_model_fn, *config)
  stock = process.next(process.initialize(), [
      tf.data.Dataset.from_tensor_slices(c).batch(2) for c in clients])
  sharded_process = fedavg.build_learning_process(
      linear_model_fn, config[0], dataclasses.replace(config[1], client_shards=2))
  initial = sharded_process.initialize()
  # The same state as TFF's FedSGD: a checkpoint of either resumes in the other.
  assert (sharded_process.initialize.type_signature.result ==
          process.initialize.type_signature.result)
  sharded = sharded_process.next(initial, [shard(clients[:2], 2), shard(clients[2:], 2)])
  np.testing.assert_allclose(
      sharded_process.get_model_weights(sharded.state).trainable[0],
      process.get_model_weights(stock.state).trainable[0], rtol=1e-6)
  assert (sharded.metrics["client_work"]["train"]["num_examples"] ==
          stock.metrics["client_work"]["train"]["num_examples"] == 6)


def test_server_learning_rate_halves_every_half_life(tff_context):
  # Server SGD at 0.3 with a half-life of 2 rounds: 0.3, 0.3 / sqrt(2), 0.15.
  config = fedavg_and_loop(algorithm="fedsgd", server_optimizer="sgd",
                           server_learning_rate=0.3, server_learning_rate_half_life=2,
                           client_shards=0)
  process = fedavg.build_learning_process(linear_model_fn, *config)
  state, expected = process.initialize(), W0
  for rate in (0.3, 0.3 / np.sqrt(2), 0.15):
    state = process.next(state, [dataset(CLIENT_A)]).state
    expected = expected - rate * mse_gradient(expected, CLIENT_A)
    np.testing.assert_allclose(
        np.asarray(process.get_model_weights(state).trainable[0]).reshape(2),
        expected, rtol=1e-5)


def test_sharded_round_refuses_batches_not_of_the_batch_size(tff_context):
  # Full batches train on the graph of the static batch size: shards batched
  # otherwise must fail loudly, not slice the wrong rows.
  clients = [(np.array([[1, 0], [0, 1], [1, 1]], np.float32),
              np.array([1, 2, 0], np.float32)), CLIENT_B]
  config = fedavg_and_loop(algorithm="fedavg", client_learning_rate=0.1,
                           server_optimizer="sgd", client_shards=1, batch_size=3)
  process = fedavg.build_learning_process(linear_model_fn, *config)
  with pytest.raises(Exception, match="not of the batch size 3"):
    process.next(process.initialize(), [shard(clients, 2)])


@pytest.mark.parametrize("algorithm,shards", [
    ("fedavg", None), ("fedsgd", None),
    ("fedavg", [[CLIENT_A, CLIENT_NAN], [CLIENT_B]]),
    ("fedsgd", [[CLIENT_A, CLIENT_NAN], [CLIENT_B]])])
def test_non_finite_client_update_is_not_averaged_in(tff_context, algorithm, shards):
  config = fedavg_and_loop(algorithm=algorithm, client_learning_rate=0.1,
                           server_optimizer="sgd", client_shards=len(shards or []))
  process = fedavg.build_learning_process(linear_model_fn, *config)
  with_nan = run_round(config, [CLIENT_A, CLIENT_NAN, CLIENT_B], shards, process)
  assert np.all(np.isfinite(with_nan))
  np.testing.assert_allclose(
      with_nan, run_round(config, [CLIENT_A, CLIENT_B],
                          shards and [[CLIENT_A], [CLIENT_B]], process), rtol=1e-6)


@pytest.mark.parametrize("config,field,value,message", [
    (FedAvgConfig, "algorithm", "fedprox", "--algorithm"),
    (FedAvgConfig, "server_learning_rate_half_life", -1, "--server_learning_rate_half_life"),
    (LoopConfig, "rounds", 0, "--rounds"),
    (LoopConfig, "clients_per_round", 0, "--clients_per_round"),
    (LoopConfig, "patience", -1, "--patience must be >= 0"),
    (LoopConfig, "min_improvement_se", -0.1, "--min_improvement_se must be >= 0"),
    (LoopConfig, "max_passes", 0, "--max_passes must be > 0"),
    (LoopConfig, "min_passes", 200, r"--min_passes must be in \[0, --max_passes=100.0\]"),
])
def test_bad_configs_name_the_flag(config, field, value, message):
  with pytest.raises(ValueError, match=message):
    config(**{field: value})


def test_bad_optimizer_names_the_flag():
  with pytest.raises(ValueError, match="--server_optimizer: unknown optimizer 'lbfgs'"):
    fedavg.build_learning_process(
        linear_model_fn, *fedavg_and_loop(server_optimizer="lbfgs"))


def test_add_scaled_adds_dense_and_repeated_embedding_rows():
  total = np.arange(8, dtype=np.float32).reshape(4, 2)
  dense = np.ones((4, 2), np.float32)
  np.testing.assert_allclose(optimizers.add_scaled(total, tf.constant(dense), -0.5),
                             total - 0.5)
  rows = tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
                          tf.constant([2, 0, 2]), tf.constant([4, 2]))
  expected = total.copy()
  expected[2] += 2.0 * np.array([1.0 + 5.0, 2.0 + 6.0])  # Row 2 twice: summed.
  expected[0] += 2.0 * np.array([3.0, 4.0])
  np.testing.assert_allclose(optimizers.add_scaled(tf.constant(total), rows, 2.0),
                             expected)


def test_the_xla_choice_reaches_the_sharded_process(monkeypatch):
  chosen = []
  monkeypatch.setattr(fedavg.client_shards, "build_sharded_process",
                      lambda *args: chosen.append(args[3]))
  for jit_compile in ({}, {"client_jit_compile": True}, {"client_jit_compile": False}):
    fedavg.build_learning_process(linear_model_fn, *fedavg_and_loop(**jit_compile))
  assert chosen == [False, True, False]  # Off unless asked for.


def test_sgd_in_place_steps_as_tff_sgd_on_dense_and_repeated_embedding_rows():
  weights = (np.arange(8, dtype=np.float32).reshape(4, 2), np.ones(3, np.float32))
  gradients = (tf.IndexedSlices(tf.constant([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]),
                                tf.constant([2, 0, 2]), tf.constant([4, 2])),
               tf.constant([0.5, -1.0, 2.0]))
  sgd = optimizers.tff_optimizer("sgd", 0.1, "client_optimizer")
  state = sgd.initialize(tuple(tf.TensorSpec(w.shape, tf.float32) for w in weights))
  assert optimizers.steps_in_place(state)
  assert not optimizers.steps_in_place(optimizers.tff_optimizer(
      "sgdm", 0.1, "client_optimizer").initialize(tf.TensorSpec([3], tf.float32)))
  _, expected = sgd.next(state, tuple(tf.constant(w) for w in weights), gradients)
  variables = [tf.Variable(w) for w in weights]
  optimizers.sgd_in_place(variables, gradients, 0.1)
  for variable, want in zip(variables, expected):
    np.testing.assert_allclose(variable.numpy(), want, rtol=1e-6)
  np.testing.assert_allclose(variables[0].numpy()[2], [4.0 - 0.6, 5.0 - 0.8])  # Both repeats.


@pytest.mark.parametrize("ks,expected", [
    ((), set()),
    ((10,), {"global_recall_at_10", "batch_recall_at_10", "global_mean_rank"}),
])
def test_recall_metrics_run_in_tff_only_when_asked(tff_context, ks, expected):
  from fed_retrieval.models import dual_encoder  # pylint: disable=g-import-not-at-top
  config = dual_encoder.DualEncoderConfig(vocabulary_size=30, max_context_length=3)
  model_fn = fedavg.retrieval_model_fn(config, ObjectiveConfig("global_softmax"), ks=ks)
  process = fedavg.build_learning_process(model_fn, *fedavg_and_loop(client_shards=0))
  contexts = np.array([[1, 2, 0], [3, 0, 0], [4, 5, 6]], np.int32)
  labels = np.array([7, 8, 9], np.int32)
  data = tf.data.Dataset.from_tensor_slices((contexts, labels)).batch(2)
  train = process.next(process.initialize(), [data, data]).metrics["client_work"]["train"]
  assert set(train) - {"loss", "num_examples", "num_batches"} == expected
  if ks:
    assert 0.0 <= train["global_recall_at_10"] <= 1.0


@pytest.mark.parametrize("algorithm,client_optimizer,jit_compiles", [
    ("fedsgd", "sgd", (False, True)),
    ("fedavg", "sgd", (False, True)),  # Without XLA, rows stepped in place.
    ("fedavg", "sgdm", (True,))])
def test_sharded_rounds_equal_tff_rounds_on_embedding_rows(
    tff_context, algorithm, client_optimizer, jit_compiles):
  # The dual encoder's embedding gradients are sparse rows (IndexedSlices);
  # item 3 appears in several batches and clients, so its rows must add up;
  # batches of 2 leave a short one (XLA compiles both shapes). One stock
  # round is the reference of each sharded process.
  from fed_retrieval.models import dual_encoder  # pylint: disable=g-import-not-at-top
  model_fn = fedavg.retrieval_model_fn(
      dual_encoder.DualEncoderConfig(vocabulary_size=12, max_context_length=3),
      ObjectiveConfig("global_softmax"))
  contexts = np.array([[1, 3, 0], [3, 0, 0], [4, 5, 3], [2, 3, 0], [6, 0, 0]], np.int32)
  labels = np.array([3, 7, 3, 8, 3], np.int32)
  points = {"0": np.arange(0, 3), "1": np.arange(3, 5)}
  data = client_data.ClientDatasets(contexts, labels, points)
  config = fedavg_and_loop(algorithm=algorithm, client_optimizer=client_optimizer,
                           client_learning_rate=0.5, server_optimizer="sgd",
                           server_learning_rate=1.0, client_shards=0, batch_size=2)
  stock_process = fedavg.build_learning_process(model_fn, *config)
  stock = stock_process.next(stock_process.initialize(), [
      data.training_dataset(c, 2, 1, None) for c in ("0", "1")])
  want = stock_process.get_model_weights(stock.state).trainable
  initial = stock_process.get_model_weights(stock_process.initialize()).trainable
  assert sum(np.abs(np.asarray(w) - i).sum() for w, i in zip(want, initial)) > 0.1
  for jit_compile in jit_compiles:
    sharded_process = fedavg.build_learning_process(
        model_fn, dataclasses.replace(config[0], client_jit_compile=jit_compile),
        dataclasses.replace(config[1], client_shards=1))
    sharded = sharded_process.next(sharded_process.initialize(),
                                   [data.shard_dataset(["0", "1"], 2, 1, [None, None])])
    for got, expected in zip(sharded_process.get_model_weights(sharded.state).trainable,
                             want):
      np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6,
                                 err_msg=f"client_jit_compile={jit_compile}")
