"""Client-level DP: the accounting against dp_accounting, the aggregator by hand,
Poisson sampling."""

import dataclasses

import dp_accounting
from dp_accounting import rdp
import numpy as np
import pytest

from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms.differential_privacy import DPConfig
from fed_retrieval.training.client_sampling import ClientSampler
from fed_retrieval.algorithms.fedavg import FedAvgConfig
from fed_retrieval.training.loop_config import LoopConfig
from tests.linear_clients import CLIENT_A, CLIENT_B, W0, dataset, linear_model_fn
from tests.linear_clients import mse_gradient


@pytest.mark.parametrize("noise,probability,rounds", [(1.0, 0.2, 20), (0.7, 0.05, 30),
                                                      (2.0, 1.0, 10)])
def test_epsilon_is_dp_accountings_for_poisson_sampled_gaussian_rounds(noise, probability,
                                                                        rounds):
  config = DPConfig(noise_multiplier=noise, target_delta=1e-5)
  # `rounds` compositions of one round's event (dp_accounting adds their RDP,
  # as composing them one by one would, 16x faster); the project scales one
  # round's RDP by the rounds itself.
  accountant = rdp.RdpAccountant()
  accountant.compose(dp_accounting.PoissonSampledDpEvent(
      probability, dp_accounting.GaussianDpEvent(noise)), count=rounds)
  assert differential_privacy.epsilon(config, probability, rounds) == pytest.approx(
      accountant.get_epsilon(1e-5), rel=1e-9)


def test_epsilon_grows_with_rounds_and_shrinks_with_noise():
  config = DPConfig(noise_multiplier=1.0)
  assert differential_privacy.epsilon(config, 0.1, 0) == 0
  assert (differential_privacy.epsilon(config, 0.1, 10) <
          differential_privacy.epsilon(config, 0.1, 50))
  assert (differential_privacy.epsilon(dataclasses.replace(config, noise_multiplier=2.0),
                                       0.1, 50) <
          differential_privacy.epsilon(config, 0.1, 50))
  assert differential_privacy.epsilon(DPConfig(noise_multiplier=0.0), 0.1, 1) == float("inf")


def run_round(dp, clients, algorithm="fedavg"):
  config = FedAvgConfig(algorithm=algorithm, client_learning_rate=0.1,
                        server_optimizer="sgd", server_learning_rate=1.0, dp=dp)
  process = fedavg.build_learning_process(linear_model_fn, config,
                                          LoopConfig(clients_per_round=len(clients)))
  output = process.next(process.initialize(), [dataset(c) for c in clients])
  return np.asarray(process.get_model_weights(output.state).trainable[0]).reshape(2)


def test_no_noise_and_no_clipping_is_plain_unweighted_fedavg(tff_context):
  # Clients count once each (2 and 1 examples): the mean of their deltas.
  delta_a = -0.1 * mse_gradient(W0, CLIENT_A)
  delta_b = -0.1 * mse_gradient(W0, CLIENT_B)
  np.testing.assert_allclose(
      run_round(DPConfig(noise_multiplier=0.0, clip_norm=1e9), [CLIENT_A, CLIENT_B]),
      W0 + (delta_a + delta_b) / 2, rtol=1e-5)
  gradient = (mse_gradient(W0, CLIENT_A) + mse_gradient(W0, CLIENT_B)) / 2
  np.testing.assert_allclose(
      run_round(DPConfig(noise_multiplier=0.0, clip_norm=1e9), [CLIENT_A, CLIENT_B],
                "fedsgd"), W0 - gradient, rtol=1e-5)


def test_a_clients_update_is_clipped_to_the_norm(tff_context):
  delta = -0.1 * mse_gradient(W0, CLIENT_B)
  clip = 0.25 * np.linalg.norm(delta)
  moved = run_round(DPConfig(noise_multiplier=0.0, clip_norm=clip), [CLIENT_B]) - W0
  np.testing.assert_allclose(moved, delta * 0.25, rtol=1e-5)
  noised = run_round(DPConfig(noise_multiplier=1.0, clip_norm=clip), [CLIENT_B]) - W0
  assert not np.allclose(noised, moved)  # Noise of std 1.0 x the clip.
  adaptive = DPConfig(noise_multiplier=0.0, clip_norm=clip, clipping="adaptive")
  np.testing.assert_allclose(run_round(adaptive, [CLIENT_B]) - W0, moved,
                             rtol=1e-5)  # The first round clips at the initial norm.


def test_poisson_sampling_takes_each_client_with_probability_q():
  sampler = ClientSampler([str(i) for i in range(200)], poisson=True)
  counts = np.zeros(200)
  sizes = []
  for round_num in range(1000):
    picks = sampler.sample(20, seed=3, round_num=round_num)
    sizes.append(len(picks))
    counts[[int(p) for p in picks]] += 1
  assert len(set(sizes)) > 5 and abs(np.mean(sizes) - 20) < 0.5  # q = 0.1, N = 200.
  assert abs(counts.mean() / 1000 - 0.1) < 0.003 and counts.min() > 60
  assert sampler.sample(20, 3, 7) == sampler.sample(20, 3, 7)


@pytest.mark.parametrize("changes,message", [
    ({"noise_multiplier": -1.0}, "--noise_multiplier must be >= 0"),
    ({"clip_norm": 0.0}, "--clip_norm must be > 0"),
    ({"clipping": "soft"}, "--dp_clipping must be one of"),
    ({"target_delta": 1.0}, "--target_delta must lie in"),
])
def test_bad_dp_settings_name_the_flag(changes, message):
  with pytest.raises(ValueError, match=message):
    DPConfig(**{"noise_multiplier": 1.0, **changes})
  with pytest.raises(ValueError, match="assumes Poisson sampling"):
    FedAvgConfig(dp=DPConfig(noise_multiplier=1.0)).check_loop(
        LoopConfig(client_sampling="uniform"))
