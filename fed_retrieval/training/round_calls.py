"""A federated run's rounds, several to a TFF call.

A TFF call costs about the same whatever it trains: an ml1m batch-softmax
FedAvg round of 2 clients took 17.5 ms, one of the default 100 clients 45-47 ms
(one-off script): Python ingests and serializes the state and the data, the
worker deserializes them and sends the new state back. `RoundCalls` trains
the rounds up to the run's next evaluation or checkpoint (every 5 rounds by
default) in one computation that calls the process's `next` once per round,
the state staying in the worker between them: the same computations on the
same data in the same order (identical weights and metrics), a fifth of the
calls. Batch softmax rounds took 49.6 ms against 65.9 ms a call each
(interleaved blocks in one worker, one-off script).

A call's rounds send their client data at once: it holds no more rounds than
fit in `MAX_CALL_BYTES` (at least one), so PU's rounds on MNIST-size images
(23 MB a round on the 10k test images, 135 MB on the full 60k) still go one
a call.

Only a `tff.learning` process on one worker chains its rounds: a sub-model
process (FedAwS, FedSS) serves its clients in Python between rounds, and TFF's
mergeable context (several workers) splits a computation at its one
aggregation. Those train a round a call, as before.
"""

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import sub_model
from fed_retrieval.training import client_sampling
from tasks import client_data
from tasks import seed_sequences

MAX_CALL_BYTES = 32 * 2 ** 20
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


def last_round_of_call(first: int, last: int, config, round_bytes: int) -> int:
  """The last round of a call that starts at round `first` (rounds count from
  1): the next that evaluates or checkpoints (`config.eval_every`,
  `checkpoint_every`), or `last` if sooner, or sooner still so that the
  rounds' client data (`round_bytes` each) fits in `MAX_CALL_BYTES`."""
  boundary = min(-(-first // every) * every
                 for every in (config.eval_every, config.checkpoint_every))
  fitting = first - 1 + max(1, MAX_CALL_BYTES // max(round_bytes, 1))
  return max(first, min(boundary, fitting, last))


class RoundCalls:
  """Trains a process's rounds on `clients`, sampled and batched as `config`
  says (clients_per_round, client_sampling, seed, batch_size, local_epochs,
  max_local_steps, eval_every, checkpoint_every), `shards` shard datasets a
  round (0: a dataset per client), as many rounds a TFF call as it may;
  `poisson`: clients sampled by Poisson (DP runs)."""

  def __init__(self, process: sub_model.Process, clients: client_data.ClientDatasets,
               config, shards: int = 0, poisson: bool = False):
    self._process = process
    self._clients = clients
    self._config = config
    self._shards = shards
    self._sampler = client_sampling.sampler_for(clients, config, poisson)
    self._chains: Dict[int, tff.Computation] = {}

  def next(self, state, first: int, last: int) -> Tuple[Any, List[Any]]:
    """Trains rounds `first`, `first + 1`, ... up to `last` or the call's last
    (`last_round_of_call`): (the state after them, each round's metrics)."""
    config = self._config
    sample = lambda round_num: self._sampler.sample(config.clients_per_round,
                                                    config.seed, round_num)
    clients = [sample(first)]
    if self._chains_rounds():
      end = last_round_of_call(first, last, config, self._clients.round_bytes(
          clients[0], config.batch_size, config.local_epochs, config.max_local_steps))
      for round_num in range(first + 1, end + 1):
        # One computation takes one count of TFF clients: a round of another
        # (Poisson sampling) starts the next call.
        ids = sample(round_num)
        if (tff_clients(len(ids), self._shards) !=
            tff_clients(len(clients[0]), self._shards)):
          break
        clients.append(ids)
    data = [round_datasets(self._clients, ids, config, round_num, self._shards)
            for round_num, ids in enumerate(clients, first)]
    if len(data) == 1:
      output = self._process.next(state, data[0])
      return output.state, [output.metrics]
    state, metrics = self._chain(len(data))(state, data)
    return state, list(metrics)

  def _chains_rounds(self) -> bool:
    return (isinstance(self._process, tff.learning.templates.LearningProcess) and
            not isinstance(tff.framework.get_context_stack().current,
                           tff.framework.MergeableCompExecutionContext))

  def _chain(self, rounds: int) -> tff.Computation:
    """(state, [the data of each of `rounds` rounds]) -> (state after them,
    [each round's metrics]): `next` called once per round."""
    if rounds not in self._chains:
      state_type, data_type = self._process.next.type_signature.parameter
      round_next = self._process.next

      @tff.federated_computation(state_type,
                                 tff.StructWithPythonType([data_type] * rounds, list))
      def chained_rounds(state, round_data):
        metrics = []
        for index in range(rounds):
          output = round_next(state, round_data[index])
          state = output.state
          metrics.append(output.metrics)
        return state, metrics

      self._chains[rounds] = chained_rounds
    return self._chains[rounds]
