"""The server's answers in a sub-model round: each client's rows of the class
table (and of the embedding bag), or a shard's clients' answers as one (the
class and bag rows a worker's calls read sent to it once a round, each
once), and what clients upload as per-row parts for `row_sums.RowSums`.
O(rows touched) per client, in NumPy: the TFF worker only ever holds the
clients' sub-models."""

from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from fed_retrieval.algorithms import row_ids
from fed_retrieval.algorithms import row_sums
from fed_retrieval.runtime import worker_values


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


class WorkerRows(NamedTuple):
  """The rows of a table (the class table, the bag) that some calls of a
  round on one worker read, each once, sent to the worker once: their sorted
  `keys` [U], `lookup` (for each row of the table, its position among the
  keys: meaningful for the keys only) and the `rows` [U, D] as a call passes
  them (`worker_values.created`: in the worker)."""
  keys: np.ndarray
  lookup: np.ndarray
  rows: Any


class CallBag(NamedTuple):
  """What a call sends of the bag: the distinct rows its shards' clients read
  as their sorted `keys` and their places among its worker's bag rows
  (`in_worker`). Each client finds its rows among the keys in the worker,
  by its own bag keys (`sub_model_clients.build_client_keys`)."""
  keys: np.ndarray
  in_worker: np.ndarray


class RoundRows:
  """The rows of a table (the class table, the bag) that a round's calls
  read, sent to each worker once a round, not once a call or shard: the
  calls of 500 clients at Amazon-670K's shape each read 95% of the bag, and
  a worker's shards of FedSS clients read many of the same class rows (4,000
  clients a round: 590 MB sent to one worker with each shard's distinct
  rows, 285 MB with the worker's; 243, 243 and 174 MB to three, 184, 184
  and 148; the tree 4.3 -> 4.0-4.1 GB and 6.8-7.4 -> 6.4-6.6, the weights
  the same to the bit; side by side, two runs each). Call i of `calls` (a
  range of TFF clients) goes to worker i mod `workers`
  (`sub_model._in_waves`); a worker's calls of one client count
  (a worker keeps an executor per count, `worker_values`) share a
  `WorkerRows`, built and created in the worker when the first of them asks
  (`of_call`), or for every group at once (`make_all`)."""

  def __init__(self, num_rows: int, make: Callable[[Any, np.ndarray, int], Any],
               keys: Sequence[np.ndarray], calls: Sequence[Tuple[int, int]],
               workers: int):
    """`keys`: the rows of the table (of `num_rows` rows) each TFF client of
    the round reads (any shape, repeats allowed); `make(context, keys,
    clients)`: those rows (sorted keys) made in the worker behind `context`
    for its calls of `clients` clients (`table_rows`, or a served table's
    pieces, `served_table`)."""
    self._num_rows, self._make, self._keys, self._calls = num_rows, make, keys, calls
    self._workers = workers
    # (worker, clients) -> its rows; a group's calls run on one worker in turn.
    self._made: Dict[Tuple[int, int], WorkerRows] = {}

  def _group(self, call: int) -> Tuple[int, int]:
    start, end = self._calls[call]
    return call % self._workers, end - start

  def make_all(self, contexts: Sequence[Any]) -> None:
    """Every group's `WorkerRows` made now, one after another, each in the
    context its calls run in (call i in contexts[i mod their number]; none:
    the default). Made by three call threads at once they took 0.38 CPU s
    a round, in turn 0.07 (4,000 clients, 3 workers; one-off, by thread
    clocks)."""
    for call in range(len(self._calls)):
      self.of_call(call, contexts[self._group(call)[0]] if contexts else None)

  def of_call(self, call: int, context) -> WorkerRows:
    """The `WorkerRows` of call `call`, run in `context` (None: the default)."""
    group = self._group(call)
    if group not in self._made:
      members = [i for i in range(len(self._calls)) if self._group(i) == group]
      keys, lookup = row_ids.distinct_and_lookup(np.concatenate(
          [np.ravel(self._keys[t]) for i in members for t in range(*self._calls[i])]),
          self._num_rows)
      keys = keys.astype(np.int32)
      self._made[group] = WorkerRows(keys, lookup, self._make(context, keys, group[1]))
    return self._made[group]


def table_rows(table: np.ndarray, type_spec) -> Callable[[Any, np.ndarray, int], Any]:
  """`RoundRows`' `make` of rows of `table` the driver holds, sent as a
  value of `type_spec`."""
  return lambda context, keys, clients: worker_values.created(
      context, table[keys], type_spec, clients)


def shard_answers(shard_keys, worker_rows: WorkerRows,
                  worker_bag: Optional[WorkerRows] = None
                  ) -> Tuple[List[tuple], Optional[CallBag]]:
  """Each shard's answer from its keys (`build_client_keys`): the places of
  its distinct keys among its worker's class rows (`worker_rows`) [U], its
  clients' keys and is_real [n, K], and its distinct keys [U] (sorted: each
  client gathers its rows by its keys' places among them, and its row sums
  come back on them); with a bag (`worker_bag`, the bag rows its worker
  holds; a shard's keys then end with its distinct bag rows), also the
  call's `CallBag`. A class row goes to a worker once a round, not once a
  shard that reads it (`RoundRows`)."""
  call_bag = None
  if worker_bag is not None:
    distinct = row_ids.distinct(np.concatenate([np.asarray(k[2]) for k in shard_keys]),
                                len(worker_bag.lookup))
    call_bag = CallBag(distinct.astype(np.int32), worker_bag.lookup[distinct])
  answers = []
  for keys in shard_keys:
    class_keys = np.asarray(keys[0])
    distinct = row_ids.distinct(class_keys.reshape(-1), len(worker_rows.lookup))
    answers.append((worker_rows.lookup[distinct].astype(np.int32), class_keys,
                    np.asarray(keys[1]), distinct.astype(np.int32)))
  return answers, call_bag


def client_parts(keys: Sequence[np.ndarray], deltas: Sequence[np.ndarray],
                 is_real: Sequence[np.ndarray], weights: Sequence[Any],
                 scaled: bool) -> row_sums.RowParts:
  """Row uploads as parts, their rows that are not real dropped (`scaled`:
  each client's deltas times its weight). A part is a client's (keys [K],
  deltas [K, D], is_real [K], its weight) or a shard's, its clients' stacked
  ([n, K], [n, K, D], [n, K], their weights [n]): one part, its clients'
  rows in their order, so `RowSums` adds the same rows in the same order
  as it would client by client (4,000 clients a round in 16 shards: 16
  parts, not 4,000; the driver's CPU making and adding them 0.044-0.048 ->
  0.025 s a round, by thread clocks, two runs each way; one-off)."""
  parts = row_sums.RowParts([], [], [], [])
  for part_keys, part_deltas, part_real, part_weights in zip(keys, deltas, is_real, weights):
    part_keys, real = np.asarray(part_keys), np.asarray(part_real).reshape(-1)
    part_weights = np.asarray(part_weights, np.float32).reshape(-1)
    part_deltas = np.asarray(part_deltas)
    sums = part_deltas.reshape(real.size, part_deltas.shape[-1])[real]
    if scaled:  # Each row times its client's weight.
      sums = sums * np.repeat(part_weights, part_keys.shape[-1])[real][:, None]
    parts.keys.append(part_keys.reshape(-1)[real])
    parts.sums.append(sums)
    parts.holders.append(np.ones(int(np.sum(real)), np.int64))
    parts.weights.extend(float(w) for w in part_weights)
  return parts


def sums_part(keys: np.ndarray, sums, weights: List[float], table_rows: int,
              holders=None) -> row_sums.RowParts:
  """A shard's sums of the class rows, or a call's of the bag
  (`sub_model_clients.ClientRound`), as one part: on every row of the table
  (dense) when it has as many, else on its rows `keys` (the same when it
  reads every row); `holders`: how many of its clients held each (the class
  rows')."""
  sums = np.asarray(sums)
  holders = [] if holders is None else [np.asarray(holders)]
  return row_sums.RowParts([keys], [sums], holders, weights,
                           dense=len(sums) == table_rows)
