"""Client sampling: uniform as before, by examples with exact inclusion probabilities."""

import types

import numpy as np
import pytest

from fed_retrieval.training import client_sampling
from fed_retrieval.training.client_sampling import ClientSampler
from tasks import client_data


def clients_with(counts):
  points, start = {}, 0
  for i, n in enumerate(counts):
    points[str(i)] = np.arange(start, start + n)
    start += n
  return client_data.ClientDatasets(np.zeros((start, 2), np.int32),
                                    np.zeros(start, np.int32), points)


def test_uniform_sampling_is_a_function_of_seed_and_round():
  sampler = ClientSampler([str(i) for i in range(50)])
  first = sampler.sample(10, seed=1, round_num=4)
  assert first == sampler.sample(10, seed=1, round_num=4)
  assert len(set(first)) == 10
  assert first != sampler.sample(10, seed=1, round_num=5)
  assert len(sampler.sample(80, 1, 1)) == 50
  # The draw runs before this module existed made (runs resume identically).
  rng = np.random.default_rng([1, 4])
  assert first == [str(i) for i in rng.choice(50, 10, replace=False)]


def test_equal_weights_sample_uniformly():
  ids = [str(i) for i in range(30)]
  assert (ClientSampler(ids, np.full(30, 1.0)).sample(7, 3, 2) ==
          ClientSampler(ids).sample(7, 3, 2))


def test_inclusion_probabilities_by_hand():
  np.testing.assert_allclose(
      client_sampling.inclusion_probabilities([1, 1, 2, 4], 2), [0.25, 0.25, 0.5, 1.0])
  # 2 * 7 / 10 = 1.4 would pass 1: that client is certain, the others share 1.
  np.testing.assert_allclose(
      client_sampling.inclusion_probabilities([1, 1, 1, 7], 2), [1 / 3, 1 / 3, 1 / 3, 1])
  np.testing.assert_allclose(client_sampling.inclusion_probabilities([3, 1], 5), [1, 1])
  with pytest.raises(ValueError, match="positive"):
    client_sampling.inclusion_probabilities([1, 0], 1)


def test_systematic_sample_has_its_size_and_inclusion_probabilities():
  probabilities = client_sampling.inclusion_probabilities(
      np.array([1, 1, 2, 3, 5, 8, 13, 1, 1, 40.0]), 4)
  rng = np.random.default_rng(0)
  draws = 20_000
  counts = np.zeros(10)
  for _ in range(draws):
    sample = client_sampling.systematic_sample(probabilities, rng)
    assert len(sample) == len(set(sample)) == 4
    counts[sample] += 1
  standard_error = np.sqrt(probabilities * (1 - probabilities) / draws)
  assert np.all(np.abs(counts / draws - probabilities) <= 4 * standard_error + 1e-12)
  assert probabilities[-1] == 1 and counts[-1] == draws


def test_local_work_weights_by_hand():
  clients = clients_with([10, 40, 100])
  # Batch 16, cap 2: the clients train on 10, 32 and 32 examples of 10, 40, 100.
  np.testing.assert_allclose(
      client_sampling.local_work_weights(clients, 16, 1, 2), [1, 1.25, 3.125])
  np.testing.assert_allclose(client_sampling.local_work_weights(clients, 16, 2, None),
                             [1, 1, 1])
  # Two epochs of 20 and 80 examples: 40 and 160 examples' work, cut at 64.
  np.testing.assert_allclose(
      client_sampling.local_work_weights(clients_with([20, 80]), 16, 2, 4), [1, 2.5])


def test_examples_sampling_trains_every_example_as_often():
  clients = clients_with([10, 40, 100, 400, 30, 20])
  config = types.SimpleNamespace(client_sampling="examples", batch_size=10,
                                 local_epochs=1, max_local_steps=3)
  sampler = client_sampling.sampler_for(clients, config)
  trained = np.minimum([10, 40, 100, 400, 30, 20], 30)
  chances = np.zeros(6)
  for round_num in range(4000):
    for client in sampler.sample(1, seed=0, round_num=round_num):
      chances[int(client)] += 1
  # Picks x examples trained / examples held: the same for every client.
  per_example = chances / 4000 * trained / np.array([10, 40, 100, 400, 30, 20])
  np.testing.assert_allclose(per_example, per_example.mean(), rtol=0.1)
  # Three a round: the 400-example client (weight 13.3 of 20.7) is certain.
  assert all("3" in sampler.sample(3, 0, r) for r in range(50))
  uniform = client_sampling.sampler_for(
      clients, types.SimpleNamespace(**{**vars(config), "client_sampling": "uniform"}))
  assert uniform.weights is None
  unset = client_sampling.sampler_for(  # A run config made before the setting.
      clients, types.SimpleNamespace(**{**vars(config), "client_sampling": None}))
  assert unset.sample(3, 0, 7) == uniform.sample(3, 0, 7)
  with pytest.raises(ValueError, match="--client_sampling must be one of"):
    client_sampling.sampler_for(clients, types.SimpleNamespace(
        **{**vars(config), "client_sampling": "heavy"}))
