"""DP of a sub-model process's dense tower (FedAwS, FedSS, full softmax):
clipped client deltas, their sum noised on the server from the round's seed,
divided by the expected clients; checked against single-client rounds and
NumPy."""

import numpy as np
import pytest

from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms.differential_privacy import ClientDP, DPConfig
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from tests.xc_reference import CLIENTS, MODEL, WIDTH, dataset

# Server SGD at rate 1: the tower moves by exactly the aggregated delta.
CONFIG = FedAwSConfig(client_learning_rate=0.3, server_optimizer="sgd",
                      server_learning_rate=1.0)
UNCLIPPED = 1e6


def tower_step(dp, clients, bag="whole"):
  """The tower's change in one round of FedAwS (the whole bag: all dense)."""
  process = fedaws.build_fedaws_process(MODEL, CONFIG, WIDTH, seed=3, bag=bag, dp=dp)
  state = process.initialize()
  out = process.next(state, [dataset(*c) for c in clients])
  return [np.asarray(a, np.float64) - b for a, b in zip(out.state["tower"], state["tower"])]


def private(noise, clip, expected):
  return ClientDP(DPConfig(noise_multiplier=noise, clip_norm=clip), expected)


def norm(tensors):
  return np.sqrt(sum(np.sum(t ** 2) for t in tensors))


@pytest.fixture(scope="module")
def client_deltas(tff_context):
  """Each client's own tower delta: a one-client round, unclipped, no noise."""
  return [tower_step(private(0.0, UNCLIPPED, 1), [c]) for c in CLIENTS]


@pytest.mark.parametrize("clip", [UNCLIPPED, 0.05])
def test_noise_zero_is_the_unweighted_mean_of_the_clipped_deltas(client_deltas, clip):
  assert min(norm(d) for d in client_deltas) > 0.05  # So 0.05 clips every client.
  clipped = [[t * min(1.0, clip / norm(d)) for t in d] for d in client_deltas]
  expected = [sum(parts) / 3 for parts in zip(*clipped)]  # Not weighted by examples.
  got = tower_step(private(0.0, clip, 3), CLIENTS)
  for g, e in zip(got, expected):
    np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-7)


def test_the_noise_is_drawn_from_the_seed_and_round(client_deltas, tff_context):
  clip, expected_clients = 0.05, 2.0
  got = tower_step(private(1.5, clip, expected_clients), CLIENTS[:1])
  rng = np.random.default_rng([3, 1])  # The process's seed, round 1.
  clipped = [t * clip / norm(client_deltas[0]) for t in client_deltas[0]]
  for g, c in zip(got, clipped):
    noise = rng.normal(0.0, 1.5 * clip, c.shape)
    np.testing.assert_allclose(g, (c + noise) / expected_clients, rtol=1e-4, atol=1e-6)


def test_a_selected_bag_is_rows_and_left_out_of_the_clip(tff_context):
  got = tower_step(private(0.0, 1e-4, 1), CLIENTS[:1], bag="selected")
  assert norm(got[1:]) == pytest.approx(1e-4, rel=1e-3)  # The dense layer, clipped.
  assert norm(got[:1]) > 1e-3  # The bag's rows moved as without DP.


def test_adaptive_clipping_is_refused_by_name():
  with pytest.raises(ValueError, match="--dp_clipping=adaptive"):
    fedaws.build_fedaws_process(MODEL, CONFIG, WIDTH, dp=ClientDP(
        DPConfig(noise_multiplier=1.0, clipping="adaptive"), 10))
