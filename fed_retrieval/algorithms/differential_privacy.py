"""Client-level differential privacy for FedAvg and FedSGD (DP-FedAvg), and
for the dense tower of the sub-model processes (`ClientDP`).

Every round each client is in with probability q = clients_per_round / N,
independently (Poisson sampling, `client_sampling.ClientSampler.poisson`);
each client's update is clipped to an L2 norm (`clip_norm`, or an adaptive
clip that tracks a quantile of the updates' norms), the clipped updates are
summed, Gaussian noise of standard deviation noise_multiplier x clip is added
and the sum is divided by the expected number of clients: TFF's
`DifferentiallyPrivateFactory` (`gaussian_fixed` / `gaussian_adaptive`), as
the unweighted aggregator of `build_unweighted_fed_avg` (FedAvg) or of
FedSGD (its weights ignored: a client counts once however many examples it
holds, which is what bounds its influence).

The guarantee is for a client's whole data (add or remove one client), and
its epsilon for a given delta comes from `dp_accounting`'s RDP accountant over
the rounds trained: a Poisson-sampled Gaussian mechanism, composed round after
round (with adaptive clipping TFF splits the noise multiplier between the
update and the norm estimate so that the same accounting holds).
What it does not cover: the evaluation and the stopping rule read the
validation users each evaluation (their data is not private here), and the
run's hyperparameters were chosen on data that is not accounted for.
"""

import dataclasses
import functools
from typing import List, Optional, Sequence, Tuple

import dp_accounting
from dp_accounting import rdp
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

CLIPPINGS = ("fixed", "adaptive")


@dataclasses.dataclass(frozen=True)
class DPConfig:
  """Client-level DP: the noise multiplier z, the clip and the accounting's delta."""
  noise_multiplier: float
  clip_norm: float = 0.1  # The fixed clip, or the adaptive clip's initial value.
  clipping: str = "fixed"
  target_unclipped_quantile: float = 0.5  # Adaptive clipping's target.
  target_delta: float = 1e-5

  def __post_init__(self):
    if not self.noise_multiplier >= 0:
      raise ValueError(f"--noise_multiplier must be >= 0, got {self.noise_multiplier}")
    if not self.clip_norm > 0:
      raise ValueError(f"--clip_norm must be > 0, got {self.clip_norm}")
    if self.clipping not in CLIPPINGS:
      raise ValueError(f"--dp_clipping must be one of {', '.join(CLIPPINGS)}, got "
                       f"'{self.clipping}'")
    if not 0 < self.target_delta < 1:
      raise ValueError(f"--target_delta must lie in (0, 1), got {self.target_delta}")


@dataclasses.dataclass(frozen=True)
class ClientDP:
  """A process's DP: the config and the expected clients a round. TFF's
  processes take `aggregator(config, expected_clients)`; a process of its own
  (the sub-model processes' dense tower) aggregates as DP-FedAvg does with
  fixed clipping: each client clips its update to `clip_norm` in L2
  (`clipped`), the server sums them, adds Gaussian noise of noise_multiplier
  x clip and divides by the expected clients (`noised_mean`)."""
  config: DPConfig
  expected_clients: float

  def __post_init__(self):
    if not self.expected_clients > 0:
      raise ValueError(f"DP needs >= 1 expected client a round, got {self.expected_clients}")

  def clipped(self, update: Sequence[tf.Tensor]) -> List[tf.Tensor]:
    """A client's update scaled to an L2 norm (all tensors together) <= clip."""
    return tf.clip_by_global_norm(list(update), self.config.clip_norm)[0]

  def noised_mean(self, total: Sequence[np.ndarray], seed: Sequence[int]
                  ) -> List[np.ndarray]:
    """(the clipped updates' sum + noise) / expected clients, the noise drawn
    from `seed` (the run's seed and round: a resumed run draws the same)."""
    rng = np.random.default_rng(list(seed))
    scale = self.config.noise_multiplier * self.config.clip_norm
    return [((np.asarray(t, np.float64) + rng.normal(0.0, scale, np.shape(t)))
             / self.expected_clients).astype(np.float32) for t in total]


def aggregator(config: DPConfig, clients_per_round: float
               ) -> tff.aggregators.UnweightedAggregationFactory:
  """The clipped, noised mean of the clients' updates."""
  if config.clipping == "adaptive":
    return tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
        noise_multiplier=config.noise_multiplier, clients_per_round=clients_per_round,
        initial_l2_norm_clip=config.clip_norm,
        target_unclipped_quantile=config.target_unclipped_quantile)
  return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=config.noise_multiplier, clients_per_round=clients_per_round,
      clip=config.clip_norm)


@functools.lru_cache(maxsize=64)
def _one_round_rdp(noise_multiplier: float, sampling_probability: float
                   ) -> Tuple[np.ndarray, np.ndarray]:
  """(orders, RDP) of one round: a Gaussian mechanism on a Poisson sample.
  Computing it takes ~0.3 s, so a run computes it once, not every round."""
  accountant = rdp.RdpAccountant()
  accountant.compose(dp_accounting.PoissonSampledDpEvent(
      sampling_probability, dp_accounting.GaussianDpEvent(noise_multiplier)))
  return accountant.orders, accountant.rdp


def epsilon(config: DPConfig, sampling_probability: float, rounds: int) -> float:
  """Epsilon at `config.target_delta` after `rounds` rounds, each a Gaussian
  mechanism on a Poisson sample of the clients (RDP accounting: the rounds'
  RDP add up, as `dp_accounting` composes `rounds` of the same event)."""
  if rounds == 0:
    return 0.0
  if config.noise_multiplier == 0:
    return float("inf")
  orders, one_round = _one_round_rdp(config.noise_multiplier, sampling_probability)
  return float(rdp.compute_epsilon(orders, rounds * one_round, config.target_delta)[0])


def check_compatible(config, dp: Optional[DPConfig]) -> None:
  """A DP run samples clients by Poisson and trains one TFF client per client."""
  if dp is None:
    return
  if config.client_sampling not in (None, "poisson"):
    raise ValueError("--noise_multiplier: DP accounting assumes Poisson sampling of "
                     f"clients, not --client_sampling={config.client_sampling}")
