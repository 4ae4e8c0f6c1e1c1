"""The server's answers in a sub-model round: each client's rows of the class
table (and of the embedding bag), or a shard's clients' answers as one (with
the bag sent to each worker once a round), and what a call's clients upload
as per-row parts for `sub_model.RowSums`.
O(rows touched) per client, in NumPy: the TFF worker only ever holds the
clients' sub-models."""

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from fed_retrieval.runtime import worker_values


class RowParts(NamedTuple):
  """Uploads for `RowSums.add` (or the bag's, `BagSums.add`): per part (a
  client, or a call's bag) its row keys (a sharded call's bag: None, every
  row), their deltas summed over its clients (with the `clients` mean, each
  client's scaled by its weight), how many of its clients held each key (a
  call's bag: not counted, its mean is over every client), and its clients'
  weights."""
  keys: List[Optional[np.ndarray]]
  sums: List[np.ndarray]
  holders: List[np.ndarray]
  weights: List[float]


def answers(state, keys, bagged: bool) -> List[tuple]:
  """What the server sends each client: its class rows, keys and is_real;
  with a bag, also its bag rows and their keys."""
  result = []
  bag = np.asarray(state["tower"][0]) if bagged else None  # A tensor's view.
  for client_keys in keys:
    class_keys, is_real = np.asarray(client_keys[0]), np.asarray(client_keys[1])
    answer = (state["table"][class_keys], class_keys, is_real)
    if bagged:
      bag_keys = np.asarray(client_keys[2])
      answer += (bag[bag_keys], bag_keys)
    result.append(answer)
  return result


class RoundBags:
  """The bag as its worker holds it for a round's sharded calls: sent to each
  worker once a round, not once a call (a call of 500 clients at
  Amazon-670K's shape reads 95% of the bag, so a worker's calls read nearly
  all of it). Call i of `calls` (a range of TFF clients) goes to worker i mod
  `workers` (`sub_model._in_waves`); a worker's calls of one client count (a
  worker keeps an executor per count, `worker_values`) share one value,
  created in the worker when the first of them asks (`of_call`), or for every
  group at once (`make_all`).

  A client reads its rows there by its own keys (`sub_model_clients`), and a
  call returns the bag's deltas on every row: the server neither receives
  each client's keys nor sends each its positions (at Amazon-670K's shape,
  4,000 clients of ~1,900 features, 30 MB each way a round), and sums a
  call's deltas onto the bag as they are (`sub_model.BagSums.add`)."""

  def __init__(self, bag: np.ndarray, calls: Sequence[Tuple[int, int]], workers: int,
               type_spec):
    self._bag, self._calls = bag, calls
    self._workers, self._type_spec = workers, type_spec
    # (worker, clients) -> the bag in it; a group's calls run on one worker in turn.
    self._made: Dict[Tuple[int, int], Any] = {}

  def _group(self, call: int) -> Tuple[int, int]:
    start, end = self._calls[call]
    return call % self._workers, end - start

  def make_all(self, contexts: Sequence[Any]) -> None:
    """Every group's bag made now, one after another, each in the context
    its calls run in (call i in contexts[i mod their number]; none: the
    default). Made by three call threads at once they took 0.38 CPU s a
    round, in turn 0.07 (4,000 clients, 3 workers; one-off, by thread
    clocks)."""
    for call in range(len(self._calls)):
      self.of_call(call, contexts[self._group(call)[0]] if contexts else None)

  def of_call(self, call: int, context) -> Any:
    """The bag call `call` reads, in `context` (None: the default)."""
    group = self._group(call)
    if group not in self._made:
      self._made[group] = worker_values.created(context, self._bag, self._type_spec,
                                                group[1])
    return self._made[group]


def shard_answers(state, shard_keys) -> List[tuple]:
  """Each shard's answer from its keys (`build_client_keys`): its clients'
  class rows [n, K, D], keys and is_real [n, K] (their bag rows are the
  worker's, `RoundBags`)."""
  result = []
  for keys in shard_keys:
    class_keys = np.asarray(keys[0])
    result.append((state["table"][class_keys], class_keys, np.asarray(keys[1])))
  return result


def client_parts(keys: Sequence[np.ndarray], deltas: Sequence[np.ndarray],
                 is_real: Sequence[np.ndarray], weights: Sequence[float],
                 scaled: bool) -> RowParts:
  """Clients' row uploads as parts, their rows that are not real dropped
  (`scaled`: each client's deltas times its weight)."""
  real = [np.asarray(r) for r in is_real]
  return RowParts(
      [np.asarray(k)[r] for k, r in zip(keys, real)],
      [np.asarray(d)[r] * w if scaled else np.asarray(d)[r]
       for d, r, w in zip(deltas, real, weights)],
      [np.ones(int(np.sum(r)), np.int64) for r in real], [float(w) for w in weights])
