"""glibc's malloc kept from handing the rounds' large buffers back to the kernel.

A round moves its values between processes through several copies of each
(TFF nests a value's protos one level at a time, gRPC sends them, the other
side parses them). By default glibc maps each allocation above its mmap
threshold afresh and trims the heap's free top, so every round faulted its
buffers' pages in again. `SETTINGS`, this process's and every worker's it
starts: no allocation mapped, up to 256 MB of free heap kept and the heap
grown 256 MB at a time (each alone gave the faults back), at most one arena
a core. On `xc_small`'s FedAwS a steady round took 169-187 ms instead of
222-233, on Bibtex's 739-766 ms instead of 998-1034; MovieLens's ~2 MB
rounds did not move.

Nothing is mapped because glibc maps whatever is above 32 MB (its largest
threshold): at Amazon-670K's shape each call's bag rows and sums are 35 MB
arrays, which a worker copies five or six times a call (the request, TFF's
value, the tensor, TF's sums, the answer), and the driver's 171 MB table is
copied each round. Mapped, they were 98% of a FedAwS worker's 100-150k page
faults a round (perf), which took 0.3-3.8 CPU s a round in the kernel for
the same calls on a 2-core virtual machine. From the heap one FedAwS worker
took 17.0 CPU s a round instead of 20.6-22.5 (0.5 of it in the kernel,
not 4.2-5.4), each of three 5.6-7.5 instead of 6.5-9.5 (4,000
clients, calls in turn; the driver, tuned so first, 0.84-0.90 instead of
1.04-1.41); one FedSS worker 27.6 instead of 32.2 (side by side), each of
three 13.2-14.5 against 11.9-15.9. The cost: each process keeps its calls'
peak, including the values TFF's executor has the worker free 20 disposals
at a time (those trees on 3 workers: FedAwS's 5.7-6.0 GB instead of
5.0-5.2, FedSS's 7.3-7.6 against 6.1-6.4, under their 8 GB bound). The
driver alone has one arena: 1.48-1.58 CPU s a round instead of 1.83-2.13
(FedSS, calls in turn), its threads waiting on the workers, not on malloc;
a worker runs TF's threads, and with one arena a FedAwS worker took more
CPU (23.4 against 20.3 s a round, side by side).

Nor does the driver let NumPy advise 2 MB pages for its large arrays: with
nothing mapped they lie in malloc's heap, which the advice then covers for
every later buffer there, and a page the kernel took back is zeroed whole
when touched again. At Amazon-670K's shape (4,000 clients, one worker, the
index on 3 shards) the ninth round of every run took the driver 4.8-6.8 CPU
s against 1.3-2.0 for rounds 3-8, three quarters of it zeroing huge pages
(perf), and 2.0 s without the advice (five runs against one, rounds 3-8
alike); on three workers the driver took 1.64 CPU s a round over rounds 4-9
instead of 2.22 (`benchmark_round_cost --repeats=6`, the first sitting
of one run each).

One thing undoes the tuning now and then: protobuf 4's Python messages call
`malloc_trim(0)` at every 10,000th free of their memory, which hands every
free page of every arena back to the kernel whatever the thresholds, and
the next round faults them in again (at Amazon-670K's shape 200-250k
faults, 0.5-5.5 CPU s more than another round on a 2-core virtual
machine). `value_bytes` keeps the driver's messages few (~430 such frees
a round there, a trim every ~23 rounds instead of every ~8).

The driver is tuned with `mallopt` while it has one thread (at the start of
a program that drives TFF rounds, `scripts.cli`; any other at its first
connection to a worker): glibc fixes the arena limit once reached, and
tuned later the threads already started kept their arenas (FedSS's tree on
3 workers 11.0-11.3 GB instead of 8.8-8.9). A worker gets `SETTINGS` through
glibc's environment variables. A setting already in the environment (or
a mapping threshold) wins: then none is changed (one alone can be worse
than none).
"""

import ctypes
import os
import platform
from typing import Dict

from absl import logging

from fed_retrieval.runtime import worker_threads

# glibc's mallopt parameters and their environment variables.
_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
SETTINGS = {  # name: (mallopt parameter, value); the driver's and the workers'.
    "MALLOC_MMAP_MAX_": (_M_MMAP_MAX, 0),
    "MALLOC_ARENA_MAX": (_M_ARENA_MAX, worker_threads.available_cores()),
    "MALLOC_TRIM_THRESHOLD_": (_M_TRIM_THRESHOLD, 256 * 1024 * 1024),
    "MALLOC_TOP_PAD_": (_M_TOP_PAD, 256 * 1024 * 1024),
}
# The driver's: the workers', but one arena.
DRIVER_SETTINGS = {**SETTINGS, "MALLOC_ARENA_MAX": (_M_ARENA_MAX, 1)}
# A user's choice of any of these wins (none of the settings is then made).
USERS_OWN = (*SETTINGS, "MALLOC_MMAP_THRESHOLD_")

# NumPy's switch for advising the kernel to back its large arrays with 2 MB
# pages; the driver turns the advice off unless the environment sets it.
NUMPY_HUGEPAGES = "NUMPY_MADVISE_HUGEPAGE"

_tuned = False


def _user_set(environment: Dict[str, str]) -> bool:
  return any(name in environment for name in USERS_OWN)


def _is_glibc() -> bool:
  return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def worker_environment() -> Dict[str, str]:
  """The environment a worker starts with: this one, plus the settings unless
  any of `USERS_OWN` is already set."""
  environment = dict(os.environ)
  if not _user_set(environment):
    environment.update({name: str(value) for name, (_, value) in SETTINGS.items()})
  return environment


def tune_this_process() -> bool:
  """Applies `DRIVER_SETTINGS` to this process's malloc and turns NumPy's
  huge-page advice off (once; glibc only, and not when the environment sets
  any of `USERS_OWN`; the advice stays when it sets `NUMPY_HUGEPAGES`). Returns
  whether the settings are in effect."""
  global _tuned
  if _tuned:
    return True
  if _user_set(os.environ) or not _is_glibc():
    return False
  libc = ctypes.CDLL(None)
  for name, (parameter, value) in DRIVER_SETTINGS.items():
    if libc.mallopt(parameter, value) != 1:
      logging.warning("mallopt(%s=%d) was refused; malloc keeps its default", name, value)
      return False
  if NUMPY_HUGEPAGES not in os.environ:
    import numpy  # pylint: disable=g-import-not-at-top  # After mallopt (its threads).
    numpy.core.multiarray._set_madvise_hugepage(False)  # pylint: disable=protected-access
  _tuned = True
  return True
