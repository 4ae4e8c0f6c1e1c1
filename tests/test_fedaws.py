"""FedAwS: one round against a hand computation, collapse, and what a client downloads."""

import numpy as np
import pytest

from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.evaluation import classification_metrics
from fed_retrieval.models import xc_encoder
from tasks.xc import family as xc_family
from tasks.xc import xc_task
from tests.configs import xc_settings_of
from tests.spreadout_reference import numpy_topk_step
from tests.xc_reference import CLIENTS
from tests.xc_reference import MODEL
from tests.xc_reference import WIDTH
from tests.xc_reference import all_client_shapes
from tests.xc_reference import dataset
from tests.xc_reference import numeric_sgd_step
from tests.xc_reference import numpy_tower
from tests.xc_reference import round_data
from tests.xc_reference import server_average



def numpy_loss(weights, row, ids, values, margin=0.9):
  g = numpy_tower(weights, ids, values)
  w = row / np.linalg.norm(row)
  return np.mean(np.maximum(margin - g @ w, 0.0) ** 2)


@pytest.mark.parametrize("bag,shards", [
    ("selected", None), ("whole", None),
    ("selected", [[0, 1], [2]]),  # Two TFF clients: the first does two clients.
    ("whole", [[0, 1, 2]])])
def test_one_round_matches_a_hand_computation(bag, shards):
  config = FedAwSConfig(client_learning_rate=0.3, server_optimizer="sgd",
                        server_learning_rate=1.0, spreadout="topk", spreadout_k=2,
                        spreadout_lambda=2.0)
  process = fedaws.build_fedaws_process(MODEL, config, max_features=WIDTH, seed=3,
                                        bag=bag, sharded=shards is not None)
  state = process.initialize()
  start = [np.asarray(w, np.float64) for w in process.get_model_weights(state).trainable]
  tower, table = start[:-1], start[-1]
  out = process.next(state, round_data(CLIENTS, shards))
  got = [np.asarray(w) for w in process.get_model_weights(out.state).trainable]

  tower_deltas, row_deltas, sizes = [], {1: [], 3: []}, []
  for ids, values, labels in CLIENTS:
    row = table[labels[0]]
    new_tower, new_row = numeric_sgd_step(
        tower, row, lambda t, r, ids=ids, values=values: numpy_loss(t, r, ids, values),
        0.3)
    tower_deltas.append([n - o for n, o in zip(new_tower, tower)])
    row_deltas[labels[0]].append(new_row - row)
    sizes.append(len(labels))
  expected_tower, averaged = server_average(tower, table, tower_deltas, sizes,
                                            row_deltas)
  expected_table = numpy_topk_step(averaged, np.array([1, 3]), 2, 2.0 * 0.3)
  for g, e in zip(got[:-1], expected_tower):
    np.testing.assert_allclose(g, e, atol=2e-5)
  np.testing.assert_allclose(got[-1], expected_table, atol=2e-5)
  # Untouched by clients and not a neighbour of 1 or 3: unchanged.
  neighbours = set()
  u = averaged / np.linalg.norm(averaged, axis=1, keepdims=True)
  for c in (1, 3):
    cos = u @ u[c]
    cos[c] = -np.inf
    neighbours |= set(np.argsort(-cos)[:2])
  for c in set(range(5)) - {1, 3} - neighbours:
    np.testing.assert_allclose(got[-1][c], table[c], atol=1e-7)
  loss = out.metrics["client_work"]["train"]
  assert loss["num_examples"] == 7


def test_fixed_class_embeddings_never_move_the_table():
  config = FedAwSConfig(algorithm="fixed_class_embeddings", server_optimizer="sgd",
                        server_learning_rate=1.0)
  process = fedaws.build_fedaws_process(MODEL, config, max_features=WIDTH)
  state = process.initialize()
  before = process.get_model_weights(state).trainable
  after = process.get_model_weights(
      process.next(state, [dataset(*c) for c in CLIENTS]).state).trainable
  np.testing.assert_array_equal(after[-1], before[-1])
  assert not np.allclose(after[1], before[1])


@pytest.mark.parametrize("algorithm", ["fedaws", "positive_only", "fixed_class_embeddings"])
def test_a_client_downloads_its_rows_never_the_class_table(algorithm):
  config = FedAwSConfig(algorithm=algorithm, rows_per_client=1)
  process = fedaws.build_fedaws_process(MODEL, config, max_features=WIDTH)
  table_shape = (MODEL.num_labels, MODEL.embedding_dim)
  client_shapes = all_client_shapes(process)
  assert table_shape not in client_shapes
  # ... while the server state holds it (full softmax, the oracle, sends it:
  # test_fedss.py).
  assert process.initialize()["table"].shape == table_shape
  down, _ = fedaws.bytes_per_client(MODEL, config)
  tower = sum(np.prod(s) for s in MODEL.weight_shapes())
  assert down == 4 * (tower + MODEL.embedding_dim)


def test_positive_only_collapses_while_fedaws_spreads_out():
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(synthetic="xc_tiny"))
  model = xc_encoder.XCEncoderConfig(task.num_features, task.num_labels, bag_dim=16,
                                     hidden_dims=(), embedding_dim=16)
  trained = np.arange(0, task.num_labels, 4)
  spread = {}
  for algorithm in ("positive_only", "fedaws"):
    process = fedaws.build_fedaws_process(
        model, FedAwSConfig(algorithm=algorithm, server_learning_rate=0.1),
        task.feature_width)
    state = process.initialize()
    for round_num in range(8):
      state = process.next(state, [task.clients.training_dataset(str(c), 16, 2, round_num)
                                   for c in trained]).state
    table = np.asarray(process.get_model_weights(state).trainable[-1])
    spread[algorithm] = classification_metrics.mean_pairwise_cosine(table[trained])
  # Random unit rows start near 0 mean cosine; without negatives the rows drift
  # together (measured 0.24 after 8 rounds, rising), the spreadout keeps them
  # apart (0.005).
  assert spread["positive_only"] > 0.15, spread
  assert spread["fedaws"] < 0.05, spread


def test_bag_keys_and_localized_features_by_hand():
  data = dataset(*CLIENTS[2])  # Feature ids [[3, 4], [2, 0]].
  keys = xc_encoder.bag_keys(next(iter(data)))  # Its examples as one batch.
  np.testing.assert_array_equal(keys.numpy(), [0, 2, 3, 4])
  (positions, values), labels = xc_encoder.localize_features(
      next(iter(data)), keys)
  np.testing.assert_array_equal(positions.numpy(), [[2, 3], [1, 0]])
  np.testing.assert_array_equal(values.numpy(), CLIENTS[2][1].astype(np.float32))
  np.testing.assert_array_equal(labels.numpy(), [3, 3])


@pytest.mark.parametrize("bag", fedaws.BAGS)
def test_a_selected_bag_never_reaches_a_client(bag):
  process = fedaws.build_fedaws_process(MODEL, FedAwSConfig(), max_features=WIDTH,
                                        bag=bag)
  bag_shape = MODEL.weight_shapes()[0]
  assert (bag_shape in all_client_shapes(process)) == (bag == "whole")
  # Bytes: 3 bag rows instead of the 5 of the whole bag, their ids up.
  dense = sum(np.prod(s) for s in MODEL.weight_shapes()[1:])
  down, up = fedaws.bytes_per_client(MODEL, FedAwSConfig(), bag_rows=3)
  assert down == 4 * (3 * MODEL.bag_dim + dense + MODEL.embedding_dim)
  whole_down, whole_up = fedaws.bytes_per_client(MODEL, FedAwSConfig())
  assert whole_down - down == 4 * 2 * MODEL.bag_dim
  assert whole_up - up == 4 * 2 * MODEL.bag_dim - 4 * 3


def test_the_oracle_is_full_softmax_at_fedaws_rates():
  # One whole-table process serves both papers: the oracle is FedSS's full
  # softmax (its rows' server step) with FedAwS's client and server rates.
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(synthetic="xc_tiny"))
  settings = xc_settings_of(task.config, fedaws=FedAwSConfig(
      client_learning_rate=0.3, server_learning_rate=0.02),
                            fedss=FedSSConfig(client_learning_rate=0.05,
                                              row_learning_rate=7.0))
  oracle = xc_family.algorithm_config(task, settings, "softmax_oracle")
  assert isinstance(oracle, FedSSConfig) and oracle.algorithm == "full_softmax"
  assert (oracle.client_learning_rate, oracle.server_learning_rate,
          oracle.row_learning_rate) == (0.3, 0.02, 7.0)
  with pytest.raises(ValueError, match="full softmax"):
    fedaws.build_fedaws_process(MODEL, FedAwSConfig(algorithm="softmax_oracle"), WIDTH)
