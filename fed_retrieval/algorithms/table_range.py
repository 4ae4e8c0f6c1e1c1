"""A range of a class table's rows and their round's sums, served beside the
TFF workers (`scripts.table_server`), in NumPy and gRPC alone.

The driver of a sub-model round (`sub_model`) otherwise sends each worker the
class rows its calls read and receives every shard's row sums (at
Amazon-670K's shape, 4,000 FedSS clients on 3 workers, 323 of the 516 MB it
sends and 485 of the 781 MB it receives a round), and folds and averages
them. A
`TableRange` does that for its rows with the workers directly: it creates
in a worker's executor the rows of its range that the worker's calls read
(`make_rows`, the request's bytes written by `tff_wire`), reads each call's
sums of its rows that the call left in the worker (`fold`, in the order the
driver asks, which is the calls' order: the same sums to the bit as the
driver's `row_sums.RowSums`), and adds their means (`add_means`). Its
methods take and return arrays only (`array_service`; text as UTF-8 bytes).
"""

from typing import Dict, Tuple

import grpc
import numpy as np

from fed_retrieval.algorithms import row_sums
from fed_retrieval.runtime import tff_wire

SERVED = ("load", "clear", "make_rows", "fold", "add_means", "rows", "traffic")
_SERVICE = "/tensorflow_federated.v0.ExecutorGroup/"
# As the driver's channels (`tff_runtime`): a call's sums exceed gRPC's 4 MB.
_GRPC_OPTIONS = [("grpc.max_receive_message_length", 2 * 1000 * 1000 * 1000),
                 ("grpc.max_send_message_length", 2 * 1000 * 1000 * 1000)]


def text(value: str) -> np.ndarray:
  """`value` as the array a served method takes."""
  return np.frombuffer(value.encode(), np.uint8)


def _read(value: np.ndarray) -> str:
  return bytes(np.asarray(value, np.uint8)).decode()


class TableRange:
  """Rows [first, first + n) of a class table, their sums over a round's
  calls (`row_sums.RowSums`), and a gRPC channel per TFF worker it talks to."""

  def __init__(self):
    self._first, self._rows, self._sums = 0, np.zeros((0, 0), np.float32), None
    self._channels: Dict[str, grpc.Channel] = {}
    self._bytes = np.zeros(2, np.int64)  # Sent to the workers, received.

  def _call(self, address: str, method: str, request: bytes) -> bytes:
    """`method` of the worker at `address`. A worker started again at an
    address keeps it, while this server's channel may still hold the old
    process's connection (idle since, never told it broke): a call that
    finds it unavailable is made once more on a new channel."""
    for attempt in range(2):
      if address not in self._channels:
        self._channels[address] = grpc.insecure_channel(address, options=_GRPC_OPTIONS)
      try:
        response = self._channels[address].unary_unary(_SERVICE + method)(request)
        break
      except grpc.RpcError as e:
        if attempt or e.code() != grpc.StatusCode.UNAVAILABLE:
          raise
        self._channels.pop(address).close()
    self._bytes += (len(request), len(response))
    return response

  def load(self, first: np.ndarray, rows: np.ndarray, row_mean: np.ndarray) -> tuple:
    """The range is rows [first, first + len(rows)), now `rows`; a round's
    row means are `row_mean`'s (`row_sums.RowSums`)."""
    self._first, self._rows = int(first), np.array(rows, np.float32)  # Its own.
    self._sums = row_sums.RowSums(len(rows), rows.shape[1], _read(row_mean))
    return ()

  def clear(self) -> tuple:
    """A round starts: nothing summed."""
    self._sums.clear()
    return ()

  def make_rows(self, address: np.ndarray, executor: np.ndarray,
                federated_type: np.ndarray, keys: np.ndarray) -> tuple:
    """The rows of `keys` (the table's, sorted, within the range) created in
    the executor `executor` of the worker at `address` as a value of the
    serialized `federated_type`: ([its id there as bytes])."""
    request = tff_wire.create_value_request(
        _read(executor), bytes(np.asarray(federated_type, np.uint8)),
        self._rows[np.asarray(keys, np.int64) - self._first])
    response = self._call(_read(address), "CreateValue", request)
    return (text(tff_wire.created_ref(response)),)

  def fold(self, address: np.ndarray, executor: np.ndarray, ref: np.ndarray,
           weight: np.ndarray) -> tuple:
    """Adds the sums of the range's rows that a call left in the worker at
    `address` as the value `ref` (each shard's (keys, sums, holders)), shard
    by shard; the call's clients weigh `weight` (`RowSums`)."""
    response = self._call(_read(address), "Compute",
                          tff_wire.compute_request(_read(executor), _read(ref)))
    for i, (keys, sums, holders) in enumerate(tff_wire.federated_structs(response)):
      self._sums.add(row_sums.RowParts(
          [keys.astype(np.int64) - self._first], [sums], [holders],
          [float(weight)] if i == 0 else [], dense=len(keys) == len(self._rows)))
    return ()

  def add_means(self, rate: np.ndarray) -> tuple:
    """Each row held this round moves by `rate` times its mean delta."""
    self._sums.add_means(self._rows, float(rate))
    self._sums.clear()
    return ()

  def rows(self) -> Tuple[np.ndarray]:
    return (self._rows,)

  def traffic(self) -> Tuple[np.ndarray]:
    """([bytes sent to the workers, received from them] so far): what a
    server adds to its machine's link (messages, not their gRPC framing)."""
    return (self._bytes.copy(),)
