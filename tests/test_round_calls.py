"""A run's rounds as TFF calls (`round_calls`): the clients a round samples,
their datasets and shards, one `next` call a round."""

import types

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.algorithms import fedavg
from fed_retrieval.training import client_sampling
from fed_retrieval.training import round_calls
from fed_retrieval.training.loop_config import LoopConfig
from tasks import client_data
from tests.configs import fedavg_and_loop
from tests.linear_clients import linear_model_fn


def linear_clients() -> client_data.ClientDatasets:
  """Six clients of a linear model (y = x . w), 1-4 points each."""
  rng = np.random.default_rng(0)
  sizes = [1, 2, 3, 4, 2, 3]
  inputs = rng.normal(size=(sum(sizes), 2)).astype(np.float32)
  labels = (inputs @ np.array([1.0, -2.0], np.float32)).astype(np.float32)
  bounds = np.cumsum([0] + sizes)
  return client_data.ClientDatasets(
      inputs, labels, {str(i): np.arange(a, b) for i, (a, b) in
                       enumerate(zip(bounds[:-1], bounds[1:]))})


@pytest.mark.parametrize("shards", [0, 2])
def test_client_i_of_a_round_shuffles_with_its_seed_sequence(shards):
  """Client i of round r trains on its examples in the order of
  default_rng(SeedSequence([seed, r, i]).generate_state(1)[0]), with or
  without shards: a run's data order, kept from before the seeding was
  vectorized (`tasks.seed_sequences`)."""
  clients = linear_clients()
  config = LoopConfig(batch_size=2, local_epochs=2, seed=3)
  ids = ["3", "1", "5", "2"]
  datasets = round_calls.round_datasets(clients, ids, config, 7, shards)
  if shards:
    labels = np.concatenate([client_data.read_shard(d).examples[1] for d in datasets])
  else:
    labels = np.concatenate([l for d in datasets for _, l in d.as_numpy_iterator()])
  label_of_point = clients.pooled()[1]  # Clients 0-5 hold points 0, 1, ... in turn.
  want = []
  for i, client in enumerate(ids):
    rng = np.random.default_rng(np.random.SeedSequence([3, 7, i]).generate_state(1)[0])
    points = clients.points(client)
    want += [label_of_point[points[rng.permutation(len(points))]] for _ in range(2)]
  np.testing.assert_array_equal(labels, np.concatenate(want))


@pytest.mark.parametrize("shards", [0, 2])
def test_a_call_trains_one_round_of_the_clients_the_round_samples(tff_context, shards):
  clients = linear_clients()
  fedavg_config, config = fedavg_and_loop(
      clients_per_round=3, batch_size=2, client_learning_rate=0.1,
      server_optimizer="sgd", server_learning_rate=0.5, client_shards=shards, seed=3,
      rounds=300)
  process = fedavg.build_learning_process(linear_model_fn, fedavg_config, config)
  initial = process.initialize()
  sampler = client_sampling.sampler_for(clients, config)
  calls = round_calls.RoundCalls(process, clients, config, shards)
  by_hand, by_calls = initial, initial
  for round_num in range(1, 4):
    output = process.next(by_hand, round_calls.round_datasets(
        clients, sampler.sample(3, config.seed, round_num), config, round_num, shards))
    by_hand = output.state
    by_calls, metrics = calls.next(by_calls, round_num)
    assert metrics["client_work"]["train"] == output.metrics["client_work"]["train"]
  for got, want in zip(tf.nest.flatten(process.get_model_weights(by_calls)),
                       tf.nest.flatten(process.get_model_weights(by_hand))):
    np.testing.assert_array_equal(got, want)
  moved = process.get_model_weights(by_hand).trainable[0] - \
      process.get_model_weights(initial).trainable[0]
  assert np.abs(moved).sum() > 0.05


def test_a_process_with_a_python_server_is_called_the_same_way():
  class PythonServer:  # As `sub_model.SubModelProcess`: `next` runs in Python.
    def next(self, state, data):
      return types.SimpleNamespace(state=state + 1, metrics={"clients": len(data)})

  config = LoopConfig(clients_per_round=2, batch_size=2, client_shards=0)
  calls = round_calls.RoundCalls(PythonServer(), linear_clients(), config)
  assert calls.next(0, 1) == (1, {"clients": 2})


@pytest.mark.parametrize("clients,shards,expected", [
    (6, 0, 6), (6, 2, 2), (1, 2, 1), (700, 2, 2), (701, 2, 3), (4000, 2, 12), (4000, 20, 20)])
def test_a_shard_holds_at_most_its_cap_of_clients(clients, shards, expected):
  assert round_calls.MAX_CLIENTS_PER_SHARD == 350
  assert round_calls.tff_clients(clients, shards) == expected
