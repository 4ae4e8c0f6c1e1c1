"""A sharded sub-model round's class table held by table servers, the driver
left with its tower: what lets the driver's share of a round shrink as
workers are added (`scripts.table_server`, `table_range.TableRange`).

Server i holds rows [bounds[i], bounds[i + 1]) (`range_bounds`). A round:
1. `ensure(table)`: the servers hold the state's table (loaded unless it is
   the array the last round ended with: a state's table is never changed in
   place), nothing summed.
2. `worker_rows`: each server creates in a worker's executor the rows of
   its range that the worker's calls read, the pieces a call gathers from
   (`sub_model_clients.ClientRound` with `table_bounds`).
3. `fold`: a call's sums of each range's rows, left in its worker, are read
   and added by that range's server, in the order `fold` is called (the
   calls' order, so the sums are the driver's to the bit); the call's
   values are dropped in the worker once read.
4. `step(rate)`: each server adds its rows' means; the new table comes back
   (the state keeps a table, as without servers: checkpoints, evaluation and
   a later `next` from an older state work alike).

FedSS at Amazon-670K's shape, 4,000 clients a round, 3 workers taking
their calls in turn and 3 servers (`scripts.benchmark_round_cost
--local_workers=1,3 --local_table_servers=0,3 --one_call_at_a_time
--sittings=2`, 6 calls of 667 clients): the driver 1.23 -> 0.55 CPU s a
round, 0.118-0.153 -> 0.059-0.063 of the round modelled on 3 machines;
each server 0.31-0.36 CPU s; the driver's bytes to each worker 172 -> 63
MB and from each 232 -> 75 (and 57 MB from each server: its range of the
table); the process tree 6.4 -> 6.3 GB; the same weights.
"""

import concurrent.futures
import functools
from typing import Any, List, Optional, Sequence

import numpy as np
from tensorflow_federated.python.core.impl.types import type_serialization

from fed_retrieval.algorithms import table_range
from fed_retrieval.runtime import array_service
from fed_retrieval.runtime import worker_values

FLAG = "table_servers"


def range_bounds(num_rows: int, servers: int) -> np.ndarray:
  """[servers + 1] int32: where each server's rows start, and the end."""
  return np.linspace(0, num_rows, servers + 1).round().astype(np.int32)


class RemoteRange:
  """A `TableRange` served at `address`, with its methods; errors name
  `--table_servers`."""

  def __init__(self, address: str):
    self.remote = array_service.RemoteObject(address, "table server", FLAG)
    for method in table_range.SERVED:
      setattr(self, method, functools.partial(self.remote.call, method))


_addresses: List[str] = []  # Set by `use_table_servers`.


def use_table_servers(addresses: Sequence[str]) -> None:
  """Sub-model processes built from now on keep their class table on the
  servers at `addresses` (host:port each, `scripts.table_server`; none: in
  the driver)."""
  global _addresses
  _addresses = array_service.addresses(addresses, FLAG)


def table_servers() -> List[str]:
  return list(_addresses)


class ServedTable:
  """The class table of a sharded sub-model process on servers (module
  docstring); `row_mean` as `row_sums.RowSums`'."""

  def __init__(self, addresses: Sequence[str], num_rows: int, row_mean: str):
    self._servers = [RemoteRange(a) for a in addresses]
    self.bounds = range_bounds(num_rows, len(addresses))
    self._row_mean = row_mean
    self._loaded: Optional[np.ndarray] = None  # The table the servers hold.
    # A server's folds in the order asked, beside the round's calls.
    self._queues = [concurrent.futures.ThreadPoolExecutor(1) for _ in self._servers]
    self._folds: List[concurrent.futures.Future] = []

  def _each(self, method: str, *per_server) -> List[Any]:
    """`method` on every server at once, server i given per_server[j][i]."""
    return array_service.call_each([
        functools.partial(getattr(server, method), *(args[i] for args in per_server))
        for i, server in enumerate(self._servers)])

  def ensure(self, table: np.ndarray) -> None:
    """The servers hold `table`, nothing summed (step 1)."""
    if table is not self._loaded:
      ranges = [table[a:b] for a, b in zip(self.bounds[:-1], self.bounds[1:])]
      count = len(self._servers)
      self._each("load", [np.int64(a) for a in self.bounds[:-1]], ranges,
                 [table_range.text(self._row_mean)] * count)
      self._loaded = table
    else:
      self._each("clear")

  def worker_rows(self, context, keys: np.ndarray, clients: int, type_spec) -> list:
    """The rows of `keys` (sorted) as pieces, a server's each, made in the
    worker behind `context` for its calls of `clients` clients (step 2)."""
    address, executor = worker_values.placed(context, clients)
    federated = type_serialization.serialize_type(type_spec).federated
    federated = np.frombuffer(federated.SerializeToString(), np.uint8)
    splits = np.searchsorted(keys, self.bounds)
    count = len(self._servers)
    refs = self._each("make_rows", [table_range.text(address)] * count,
                      [table_range.text(executor)] * count, [federated] * count,
                      [keys[a:b] for a, b in zip(splits[:-1], splits[1:])])
    return [worker_values.adopted(context, clients, bytes(ref).decode(), type_spec)
            for ref, in refs]

  def fold(self, context, clients: int, pieces: Sequence[Any], weight: float) -> None:
    """Queues each server's read of its piece of a call's sums, which the
    call of `clients` clients left in the worker behind `context`; the call's
    clients weigh `weight` (step 3). Returns at once."""
    address, executor = map(table_range.text, worker_values.placed(context, clients))
    for queue, server, piece in zip(self._queues, self._servers, pieces):
      # `piece` lives (in the worker) until its server has read it.
      self._folds.append(queue.submit(
          lambda server=server, piece=piece: server.fold(
              address, executor, table_range.text(piece.reference.id),
              np.float64(weight))))

  def step(self, rate: float) -> np.ndarray:
    """Once every fold is in, each server adds its rows' means at `rate`:
    the new table (step 4)."""
    folds, self._folds = self._folds, []
    for fold in folds:
      fold.result()
    self._each("add_means", [np.float64(rate)] * len(self._servers))
    self._loaded = np.concatenate([rows for rows, in self._each("rows")])
    return self._loaded
