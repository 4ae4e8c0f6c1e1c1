"""How many threads one TF op may use in a TFF worker: its share of the cores.

A round runs several client computations in the worker at once: the 2 shards
of clients by default (`--client_shards`), or one call per client. TF lets
each op of each use every core (its intra-op pool), so on this 2-core machine
the two shards' large ops each split across both cores and wait on each
other. With one thread an op (`TF_NUM_INTRAOP_THREADS`, which the worker's TF
reads when it starts), each shard keeps a core: steady FedAvg rounds, a fresh
worker each way, alternated (10 rounds after 5):
- ml-latest-small: hinge + spreadout 1507-1514 -> 871-888 ms, global softmax
  834-1086 -> 548-558 ms, batch softmax 92-135 -> 76-81 ms;
- synthetic ml1m: H+S 603-667 -> 427-435 ms, global softmax 344-373 ->
  276-286 ms, batch softmax unchanged (62-78 / 61-74 ms);
- Bibtex FedAwS 884-1055 -> 658-742 ms; `xc_small` FedAwS 212-253 ->
  191-215 ms, FedSS 289-301 -> 227-260 ms;
- the PU CNN on the digits 281-343 -> 131-137 ms.
A worker this project starts gets the cores divided by the shards a round
runs at once by default (`DEFAULT_CLIENT_SHARDS`, the federated configs'
default; at least 1); a value already in the environment wins (set it for
another `--client_shards`: with one shard, ops may use every core).
"""

import os
from typing import Dict, Optional

VARIABLE = "TF_NUM_INTRAOP_THREADS"
# The shards of clients a round runs at once in a worker by default: the
# `client_shards` default of the MovieLens and XC run configs.
DEFAULT_CLIENT_SHARDS = 2


def available_cores() -> int:
  """The cores this process may run on (its CPU affinity where known)."""
  if hasattr(os, "sched_getaffinity"):
    return len(os.sched_getaffinity(0))
  return os.cpu_count() or 1


def intra_op_threads(cores: Optional[int] = None) -> int:
  """Threads an op may use so that a round's default shards share the cores."""
  return max(1, (available_cores() if cores is None else cores) // DEFAULT_CLIENT_SHARDS)


def with_intra_op_threads(environment: Dict[str, str]) -> Dict[str, str]:
  """`environment` with the worker's intra-op threads set, unless it sets them."""
  if VARIABLE in environment:
    return environment
  return {**environment, VARIABLE: str(intra_op_threads())}
