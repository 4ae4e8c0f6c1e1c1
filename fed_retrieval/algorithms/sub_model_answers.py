"""The server's answers in a sub-model round: each client's rows of the class
table (and of the embedding bag), or a shard's clients' answers as one (with
the bag rows of the call's shards sent once), and what a call's clients
upload as per-row parts for `sub_model.RowSums`.
O(rows touched) per client, in NumPy: the TFF worker only ever holds the
clients' sub-models."""

from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from fed_retrieval.algorithms import row_ids


class RowParts(NamedTuple):
  """Uploads for `RowSums.add`: per part (a client, or a call's bag) its row
  keys, their deltas summed over its clients (with the `clients` mean, each
  client's scaled by its weight), how many of its clients held each key, and
  its clients' weights."""
  keys: List[np.ndarray]
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


class CallBag(NamedTuple):
  """A call's bag rows, sent once with the call's broadcast: the distinct
  rows its shards' clients read, their keys, and each shard's positions
  among them (its clients one after another)."""
  rows: np.ndarray
  keys: np.ndarray
  positions: List[np.ndarray]


def shard_answers(state, shard_keys, bagged: bool
                  ) -> Tuple[List[tuple], Optional[CallBag]]:
  """Each shard's answer from its keys (`build_client_keys`): its clients'
  class rows [n, K, D], keys and is_real [n, K]; with a bag, also each
  client's positions among the call's bag rows (one client after another)
  and each client's count of them [n], and the call's `CallBag`: the rows
  its clients read, each once however many shards read it (the shards of a
  call read nearly the same rows: at Amazon-670K's shape a shard of 250
  clients reads 95% of the bag)."""
  call_bag = None
  if bagged:
    bag = np.asarray(state["tower"][0])  # A tensor's view.
    shard_bag_keys = [np.asarray(keys[2]) for keys in shard_keys]
    distinct, positions = row_ids.distinct_and_positions(np.concatenate(shard_bag_keys),
                                                         len(bag))
    ends = np.cumsum([len(k) for k in shard_bag_keys])[:-1]
    call_bag = CallBag(bag[distinct], distinct.astype(np.int32),
                       np.split(positions.astype(np.int32), ends))
  result = []
  for i, keys in enumerate(shard_keys):
    class_keys = np.asarray(keys[0])
    answer = (state["table"][class_keys], class_keys, np.asarray(keys[1]))
    if bagged:
      answer += (call_bag.positions[i], np.asarray(keys[3]))
    result.append(answer)
  return result, call_bag


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


def call_bag_parts(call_bag: CallBag, bag_sum: np.ndarray, weights: Sequence[float]
                   ) -> RowParts:
  """A call's bag upload (its clients' weighted deltas summed on the call's
  rows, `CallBag`) as one part."""
  holders = np.bincount(np.concatenate(call_bag.positions), minlength=len(call_bag.keys))
  return RowParts([call_bag.keys], [np.asarray(bag_sum)], [holders],
                  [float(w) for w in weights])
