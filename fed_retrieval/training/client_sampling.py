"""Which clients train in a round.

- `uniform` (the default): `clients_per_round` distinct clients, each as
  likely as any other (the papers' protocol; what client-level DP accounting
  assumes).
- `poisson`: each client in with probability clients_per_round / N,
  independently, so a round's count varies: what client-level DP's
  accounting assumes (`algorithms.differential_privacy`); a DP run always
  samples this way.
- `examples`: client k is picked with a probability in
  proportion to n_k * epochs / t_k, its examples over what it trains on in a
  round (its local epochs cut at `max_local_steps` batches), so that every
  example is as likely to be trained on in a round as any other, as in
  centralized training. Under uniform sampling a cap on local steps weighs a
  heavy client's examples down by t_k / (n_k * epochs): on ml-latest-small the
  13% of users that the default cap cuts hold 54% of the training examples,
  and they are the users test recall is mostly made of. It did not help the
  MovieLens defaults there (global softmax no better beyond seed noise,
  hinge + spreadout 0.5 points worse), so it is an option. Without a cap
  this is uniform sampling. A client whose probability would pass 1 trains
  every round and the others share the rest. The draw is a fixed-size
  sample with these inclusion probabilities exactly (systematic sampling
  over a seeded random order of the clients).
Both are functions of (seed, round) only, so a resumed run samples the clients
an uninterrupted one does.
"""

from typing import List, Optional, Sequence

import numpy as np

from tasks import client_data

CLIENT_SAMPLINGS = ("uniform", "poisson", "examples")


def check_client_sampling(name: Optional[str]) -> None:
  """A known sampling; None is uniform (a config made before the setting)."""
  if name is not None and name not in CLIENT_SAMPLINGS:
    raise ValueError(f"--client_sampling must be one of {', '.join(CLIENT_SAMPLINGS)}, "
                     f"got '{name}'")


def inclusion_probabilities(weights: np.ndarray, count: int) -> np.ndarray:
  """Probabilities in proportion to `weights`, summing to `count`, none above 1."""
  weights = np.asarray(weights, dtype=np.float64)
  if np.any(weights <= 0):
    raise ValueError("client weights must be positive")
  if count >= weights.size:
    return np.ones_like(weights)
  certain = np.zeros(weights.size, dtype=bool)
  while True:
    share = (count - certain.sum()) / weights[~certain].sum()
    probabilities = np.where(certain, 1.0, weights * share)
    if np.all(probabilities <= 1.0):
      return probabilities
    certain |= probabilities > 1.0


def systematic_sample(probabilities: np.ndarray, rng: np.random.Generator
                      ) -> np.ndarray:
  """Sorted indices of a sample of round(sum(probabilities)) distinct clients
  in which client k is included with probability `probabilities[k]` exactly
  (each <= 1): the clients in a random order cover consecutive stretches of
  [0, sum) as long as their probabilities, and one uniform offset picks the
  clients whose stretches hold offset, offset + 1, ..."""
  count = int(round(float(np.sum(probabilities))))
  order = rng.permutation(len(probabilities))
  ends = np.cumsum(probabilities[order])
  ends *= count / ends[-1]  # Exactly `count` at the end, whatever the rounding.
  picks = np.searchsorted(ends, rng.uniform() + np.arange(count), side="right")
  return np.sort(order[picks])


def local_work_weights(clients: client_data.ClientDatasets, batch_size: int,
                       epochs: int, max_steps: Optional[int]) -> np.ndarray:
  """n_k * epochs / t_k of every client (in `clients.client_ids` order): 1 for
  a client that trains on all its examples every epoch, more for one the cap
  cuts."""
  examples = np.array([clients.num_examples(c) for c in clients.client_ids],
                      dtype=np.float64) * epochs
  trained = (examples if max_steps is None else
             np.minimum(examples, max_steps * batch_size))
  return examples / trained


class ClientSampler:
  """Draws a round's clients: uniformly, with inclusion probabilities in
  proportion to `weights` (one per client id; equal weights sample exactly
  as `uniform` does), or each client independently (`poisson`)."""

  def __init__(self, client_ids: Sequence[str], weights: Optional[np.ndarray] = None,
               poisson: bool = False):
    self.client_ids = list(client_ids)
    if weights is not None and np.ptp(weights) == 0:
      weights = None
    self.weights = weights
    self.poisson = poisson

  def sample(self, count: int, seed: int, round_num: int) -> List[str]:
    """The round's clients: `count` of them, or for `poisson` each with
    probability q = count / N (an empty round, probability (1 - q)^N, e^-100
    at 100 clients a round, draws again so that a round trains someone)."""
    rng = np.random.default_rng([seed, round_num])
    if self.poisson:
      probability = min(1.0, count / len(self.client_ids))
      picks = np.flatnonzero(rng.random(len(self.client_ids)) < probability)
      while not picks.size:
        picks = np.flatnonzero(rng.random(len(self.client_ids)) < probability)
    elif self.weights is None:
      picks = rng.choice(len(self.client_ids), min(count, len(self.client_ids)),
                         replace=False)
    else:
      picks = systematic_sample(inclusion_probabilities(self.weights, count), rng)
    return [self.client_ids[i] for i in picks]


def sampler_for(clients: client_data.ClientDatasets, config,
                poisson: bool = False) -> ClientSampler:
  """The sampler a loop config asks for (`client_sampling`, with its
  `batch_size`, `local_epochs` and `max_local_steps`), or Poisson's (a DP
  run's)."""
  check_client_sampling(config.client_sampling)
  if poisson or config.client_sampling == "poisson":
    return ClientSampler(clients.client_ids, poisson=True)
  if config.client_sampling in (None, "uniform"):
    return ClientSampler(clients.client_ids)
  return ClientSampler(clients.client_ids, local_work_weights(
      clients, config.batch_size, config.local_epochs, config.max_local_steps))
