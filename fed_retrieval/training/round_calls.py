"""A federated run's rounds as TFF calls: the clients each round samples, their
datasets (a dataset per client, or shards of clients), one `next` call a round.

Rounds are not chained several to a call: a computation of N chained `next`
calls costs about 1.3 s per round to build at its first call (PU digits:
1.6 s for 2 rounds, 21 s for 16; once per length and process), more than the
call overhead it saves over a run (ml1m batch softmax, 60 rounds at the
defaults, two runs each way: 118.5 / 113.8 s chained against 108.0 / 108.2 s
a round a call, the same losses and recalls to the last digit).
"""

from typing import Any, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from fed_retrieval.algorithms import sub_model
from fed_retrieval.training import client_sampling
from tasks import client_data
from tasks import seed_sequences

# A shard holds at most this many clients: a round of thousands makes more
# shards than --client_shards, so that a sub-model call (two shards, one a
# core) stays within `sub_model.MAX_CLIENTS_PER_CALL`.
MAX_CLIENTS_PER_SHARD = sub_model.MAX_CLIENTS_PER_CALL // 2


def tff_clients(clients: int, shards: int) -> int:
  """How many datasets (TFF clients) `round_datasets` makes of a round's
  `clients` clients in `shards` shards (0: one per client), a shard holding
  at most `MAX_CLIENTS_PER_SHARD`."""
  if not shards:
    return clients
  return min(clients, max(shards, -(-clients // MAX_CLIENTS_PER_SHARD)))


def round_datasets(data: client_data.ClientDatasets, clients: Sequence[str],
                   config, round_num: int, shards: int = 0) -> List[tf.data.Dataset]:
  """What a round's `next` takes: a dataset per client, or (`shards` > 0, a
  process built with `client_shards`) that many shard datasets of consecutive
  clients. Client i of the round trains on the same batches either way."""
  # Client i's shuffle seed: SeedSequence([seed, round_num, i]).generate_state(1)[0].
  seeds = [int(s) for s in seed_sequences.spawned_seeds((config.seed, round_num),
                                                         len(clients))]
  if not shards:
    return [data.training_dataset(client, config.batch_size, config.local_epochs,
                                  seed, config.max_local_steps)
            for client, seed in zip(clients, seeds)]
  bounds = np.linspace(0, len(clients), tff_clients(len(clients), shards) + 1).round()
  return [data.shard_dataset(clients[a:b], config.batch_size, config.local_epochs,
                             seeds[a:b], config.max_local_steps)
          for a, b in zip(bounds[:-1].astype(int), bounds[1:].astype(int))]


class RoundCalls:
  """Trains a process's rounds on `clients`, sampled and batched as `config`
  says (clients_per_round, client_sampling, seed, batch_size, local_epochs,
  max_local_steps), `shards` shard datasets a round (0: a dataset per
  client); `poisson`: clients sampled by Poisson (DP runs)."""

  def __init__(self, process: sub_model.Process, clients: client_data.ClientDatasets,
               config, shards: int = 0, poisson: bool = False):
    self._process = process
    self._clients = clients
    self._config = config
    self._shards = shards
    self._sampler = client_sampling.sampler_for(clients, config, poisson)

  def next(self, state, round_num: int) -> Tuple[Any, Any]:
    """Trains round `round_num` (rounds count from 1): (the state after it,
    its metrics)."""
    config = self._config
    ids = self._sampler.sample(config.clients_per_round, config.seed, round_num)
    output = self._process.next(
        state, round_datasets(self._clients, ids, config, round_num, self._shards))
    return output.state, output.metrics
