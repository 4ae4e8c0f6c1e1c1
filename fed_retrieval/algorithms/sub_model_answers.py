"""The server's answers in a sub-model round: each client's rows of the class
table (and of the embedding bag), or a shard's clients' answers as one, and
what a call's clients upload as per-row parts for `sub_model.RowSums`.
O(rows touched) per client, in NumPy: the TFF worker only ever holds the
clients' sub-models."""

from typing import List, NamedTuple, Sequence

import numpy as np


class RowParts(NamedTuple):
  """Uploads for `RowSums.add`: per part (a client, or a shard's bag) its row
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


def shard_answers(state, shard_keys, bagged: bool) -> List[tuple]:
  """Each shard's answer from its keys (`build_client_keys`): its clients'
  class rows [n, K, D], keys and is_real [n, K]; with a bag, the distinct bag
  rows its clients read (once, however many read them), their keys, each
  client's positions among them (one client after another) and each client's
  count of them [n]."""
  result = []
  bag = np.asarray(state["tower"][0]) if bagged else None
  for keys in shard_keys:
    class_keys = np.asarray(keys[0])
    answer = (state["table"][class_keys], class_keys, np.asarray(keys[1]))
    if bagged:
      distinct, positions = np.unique(np.asarray(keys[2]), return_inverse=True)
      answer += (bag[distinct], distinct.astype(np.int32), positions.astype(np.int32),
                 np.asarray(keys[3]))
    result.append(answer)
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


def shard_bag_parts(shard_answers_: Sequence[tuple], bag_sums: Sequence[np.ndarray],
                    weights: Sequence[Sequence[float]]) -> RowParts:
  """Shards' bag uploads (each its clients' weighted deltas summed on its
  distinct rows) as parts: keys and positions from the shards' answers."""
  return RowParts([a[4] for a in shard_answers_], [np.asarray(s) for s in bag_sums],
                  [np.bincount(a[5], minlength=len(a[4])) for a in shard_answers_],
                  [float(w) for shard in weights for w in shard])
