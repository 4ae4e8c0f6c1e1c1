"""The server's answers in a sub-model round: each client's rows of the class
table (and of the embedding bag), packed per shard of clients, and the
shards' per-client outputs split back into clients. O(rows touched) per
client, in NumPy: the TFF worker only ever holds the clients' sub-models."""

from typing import List, Sequence

import numpy as np


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


def pack(client_answers: Sequence[tuple], shard_sizes: Sequence[int],
         bagged: bool) -> List[tuple]:
  """Each shard's clients' answers as one: rows [n, K, D], keys and is_real
  [n, K]; with a bag, the clients' bag rows and keys one after another and
  each client's count of them [n]."""
  packed, start = [], 0
  for size in shard_sizes:
    group, start = client_answers[start:start + size], start + size
    answer = tuple(np.stack([a[j] for a in group]) for j in range(3))
    if bagged:
      answer += (np.concatenate([a[3] for a in group]),
                 np.concatenate([a[4] for a in group]),
                 np.array([len(a[4]) for a in group], np.int32))
    packed.append(answer)
  return packed


def split_clients(shard_outputs: Sequence[tuple], bag_sizes: Sequence[np.ndarray]
                  ) -> List[tuple]:
  """Per-client tuples from shard outputs `(per-client fields [n, ...]...,
  [concatenated bag field,] per-client field [n])`: a shard's bag field is cut
  at its clients' `bag_sizes` (an empty array each when there is no bag)."""
  clients = []
  for output, sizes in zip(shard_outputs, bag_sizes):
    fields = [np.asarray(f) for f in output]
    bagged = len(sizes) > 0
    cut = np.split(fields[-2], np.cumsum(sizes)[:-1]) if bagged else None
    stacked = fields[:-2] if bagged else fields[:-1]
    for i in range(len(fields[-1])):
      clients.append(tuple(f[i] for f in stacked) + ((cut[i],) if bagged else ())
                     + (fields[-1][i],))
  return clients
