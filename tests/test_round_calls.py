"""Several rounds a TFF call (`round_calls`): where a call ends, and that a
call's rounds are the rounds trained one call each."""

import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import fedavg
from fed_retrieval.training import client_sampling
from fed_retrieval.training import round_calls
from fed_retrieval.training.loop_config import LoopConfig
from tasks import client_data
from tests.configs import fedavg_and_loop
from tests.linear_clients import linear_model_fn

CAP = round_calls.MAX_CALL_BYTES


@pytest.mark.parametrize("first,last,eval_every,checkpoint_every,round_bytes,expected", [
    (1, 100, 5, 5, 1000, 5),  # Up to the next evaluation.
    (6, 100, 5, 5, 1000, 10),
    (5, 100, 5, 5, 1000, 5),  # An evaluating round ends its own call.
    (3, 100, 10, 4, 1000, 4),  # The checkpoint comes first.
    (1, 3, 5, 5, 1000, 3),  # The last round asked for.
    (1, 100, 5, 5, CAP // 2, 2),  # Only two rounds' data fit.
    (1, 100, 5, 5, 3 * CAP, 1),  # A round over the cap goes alone.
])
def test_a_call_ends_at_the_next_evaluation_checkpoint_last_round_or_byte_cap(
    first, last, eval_every, checkpoint_every, round_bytes, expected):
  config = types.SimpleNamespace(eval_every=eval_every, checkpoint_every=checkpoint_every)
  assert round_calls.last_round_of_call(first, last, config, round_bytes) == expected


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


def counting_invocations(monkeypatch) -> list:
  """Counts the calls into the current TFF context."""
  context = tff.framework.get_context_stack().current
  calls, invoke = [], context.invoke

  def counted(*args, **kwargs):
    calls.append(1)
    return invoke(*args, **kwargs)

  monkeypatch.setattr(context, "invoke", counted)
  return calls


@pytest.mark.parametrize("shards", [0, 2])
def test_a_call_of_five_rounds_trains_as_five_calls_of_one(tff_context, monkeypatch,
                                                           shards):
  clients = linear_clients()
  fedavg_config, config = fedavg_and_loop(
      clients_per_round=3, batch_size=2, client_learning_rate=0.1,
      server_optimizer="sgd", server_learning_rate=0.5, client_shards=shards, seed=3,
      rounds=300)
  process = fedavg.build_learning_process(linear_model_fn, fedavg_config, config)
  initial = process.initialize()
  sampler = client_sampling.sampler_for(clients, config)
  state, one_a_call = initial, []
  for round_num in range(1, 6):
    output = process.next(state, round_calls.round_datasets(
        clients, sampler.sample(3, config.seed, round_num), config, round_num, shards))
    state = output.state
    one_a_call.append(output.metrics)

  calls = round_calls.RoundCalls(process, clients, config, shards)
  invocations = counting_invocations(monkeypatch)
  chained, metrics = calls.next(initial, 1, config.rounds)
  assert len(invocations) == 1 and len(metrics) == 5
  for got, want in zip(tf.nest.flatten(process.get_model_weights(chained)),
                       tf.nest.flatten(process.get_model_weights(state))):
    np.testing.assert_array_equal(got, want)
  moved = process.get_model_weights(state).trainable[0] - \
      process.get_model_weights(initial).trainable[0]
  assert np.abs(moved).sum() > 0.05
  for got, want in zip(metrics, one_a_call):
    assert got["client_work"]["train"] == want["client_work"]["train"]
  # The next call goes on from round 6, to the next evaluation (round 10).
  _, metrics = calls.next(chained, 6, config.rounds)
  assert len(metrics) == 5


def test_a_process_with_a_python_server_trains_a_round_a_call():
  class PythonServer:  # As `sub_model.SubModelProcess`: `next` runs in Python.
    def next(self, state, data):
      return types.SimpleNamespace(state=state + 1, metrics={"clients": len(data)})

  config = LoopConfig(clients_per_round=2, batch_size=2, client_shards=0)
  calls = round_calls.RoundCalls(PythonServer(), linear_clients(), config)
  assert calls.next(0, 1, 100) == (1, [{"clients": 2}])


@pytest.mark.parametrize("shards,call_lengths", [
    (0, [1, 1, 1, 2, 4, 1]),  # Rounds 6-9 take 4 clients each, round 10 takes 3.
    (2, [1, 1, 1, 2, 5]),  # As 2 shards, rounds 6-10 are alike.
])
def test_a_round_of_another_client_count_starts_the_next_call(tff_context, shards,
                                                              call_lengths):
  clients = linear_clients()
  fedavg_config, config = fedavg_and_loop(
      clients_per_round=3, batch_size=2, client_sampling="poisson",
      client_shards=shards, seed=2, server_optimizer="sgd", rounds=10)
  sampler = client_sampling.sampler_for(clients, config)
  assert [len(sampler.sample(3, 2, r)) for r in range(1, 11)] == [
      3, 1, 3, 1, 1, 4, 4, 4, 4, 3]
  process = fedavg.build_learning_process(linear_model_fn, fedavg_config, config)
  calls = round_calls.RoundCalls(process, clients, config, shards)
  state, first, lengths = process.initialize(), 1, []
  while first <= config.rounds:
    state, metrics = calls.next(state, first, config.rounds)
    lengths.append(len(metrics))
    first += len(metrics)
  assert lengths == call_lengths


@pytest.mark.parametrize("clients,shards,expected", [
    (6, 0, 6), (6, 2, 2), (1, 2, 1), (500, 2, 2), (501, 2, 3), (4000, 2, 16), (4000, 20, 20)])
def test_a_shard_holds_at_most_its_cap_of_clients(clients, shards, expected):
  assert round_calls.MAX_CLIENTS_PER_SHARD == 250
  assert round_calls.tff_clients(clients, shards) == expected
