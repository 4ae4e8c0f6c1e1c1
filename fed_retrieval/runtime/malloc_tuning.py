"""glibc's malloc kept from handing the rounds' large buffers back to the kernel.

A round moves its values between this process and the TFF worker through
several copies of each (TFF nests a value's protos one level at a time, gRPC
sends them, the worker parses them): on `xc_small`'s FedAwS, ~20 MB of
sub-models in and ~20 MB of uploads out a round. By default glibc serves an
allocation above its mmap threshold (128 kB at first, raised as such blocks are
freed) with a fresh mapping, and trims the heap's free top back to the kernel,
so each round faulted its buffers' pages in again: 24-42k minor faults a round
in this process, 11-13k in the worker, and a steady round took 222-233 ms.
With allocations up to 32 MB served from the heap (`M_MMAP_THRESHOLD`, glibc's
largest), up to 256 MB of free heap kept (`M_TRIM_THRESHOLD`) and the heap
grown 256 MB at a time (`M_TOP_PAD`): 100-900 faults, 3-6k in the worker,
rounds of 169-187 ms (interleaved runs of a scratch round loop; keeping up to
1 GB was no faster: FedSS 184-187 against 182-190 ms). All three are needed:
the trim threshold alone fixes the mmap threshold at 128 kB (392-404 ms), the
two thresholds without the pad left 17k faults (195-205 ms). On the real
Bibtex data, FedAwS rounds took 739-766 ms against 998-1034 ms untuned.
MovieLens rounds move ~2 MB and did not change (ml-latest-small's batch
softmax: 75-76 against 73-81 ms). The cost: up to 256 MB of freed memory stays
in each process's RSS, and in each malloc arena: glibc gives threads that
contend for malloc arenas of their own, up to 8 a core. At most one a core
(`M_ARENA_MAX`) took the process tree's peak from 4.7 to 4.3 GB on one worker
and from 7.5 to 6.4 GB on three (4,000 clients at Amazon-670K's shape, the
index on 3 shards, 5 rounds; over 10 rounds on three, 8.0 -> 7.1 GB), the
CPU seconds alike (side by side, one run each), and FedAwS's default
benchmark round (100 clients, 10k classes) 0.126-0.133 -> 0.123-0.125 s.

The driving process also maps no allocation of its own (`M_MMAP_MAX` 0 in
`DRIVER_SETTINGS`), and its threads share one arena (`M_ARENA_MAX` 1,
below). 32 MB is glibc's largest mmap threshold, and at Amazon-670K's
shape each call's bag sums arrive as a 35 MB response and the 171 MB
table is copied each round: each was mapped afresh and faulted in, a
quarter of the driver's CPU (perf). From the heap, the driver took 0.84-0.90
CPU s a round instead of 1.04-1.41 on 3 workers (4,000 clients, the index on
3 shards; four alternated runs each; on one worker within the noise) and
keeps ~0.25 GB more (the tree over 10 rounds 7.1 -> 7.3 GB; one-off, by each
process's RSS after each round); smaller rounds
(FedAwS's default benchmark round, 14 alternated runs each; the real data
sets' runs) did not move beyond the noise. The workers still map theirs,
which bounds the tree at a cost in CPU where page faults are dear: at that
shape (4,000 clients, the index on 3 shards) the kernel took 5.4-6.1 of one
worker's 25.1-25.5 CPU s a round on a noisy 2-core VM, 1.4-1.7 of
16.2-19.4 with `MALLOC_MMAP_MAX_=0` in the workers' environment too (two
runs each, alternated); FedSS's three local workers took 10.2-14.0 against
13.6-14.3, but its tree peaked at 8.4-8.5 GB against 7.4 (two runs against
one; each worker keeps its calls' peak in its heap), over the 8 GB its
4,000-client rounds are bounded to here. The workers' trim threshold and
pad at 32 MB kept FedSS's tree at 7.6 GB but gave the faults back (one
FedAwS worker 21.2 CPU s, 5.9 in the kernel; one run each); one arena on
the workers, 24.5-25.2 CPU s. Those runs' shards still held every client's
rows at once (before `sub_model_clients.ShardRowSums`). Since, alternated on
a noisy 2-core VM whose kernel hands freed memory back to its host (so a
worker idle between its calls may fault its pages in from the host):
FedSS's tree on three workers (`benchmark_round_cost --algorithm=fedss
--local_workers=3`, 4,000 clients) peaked at 6.4 and 6.7 GB with the
workers mapping, 7.5 and 8.1 with `MALLOC_MMAP_MAX_` 0 added to `SETTINGS`
(over the bound again; set in the environment it would switch the rest
off) and 6.6 and 6.7 with `MALLOC_ARENA_MAX` 1 there too. With the calls
one at a time (FedAwS, `--local_workers=1,3 --local_spreadout_shards=3
--one_call_at_a_time`), the busiest of three workers took 0.325-0.469x one
worker's CPU mapping (five sittings, median 0.417), 0.306-0.407x (four,
median 0.366) not mapping, and 0.288-0.386x (five, median 0.340) not
mapping on one arena; but on one arena every worker took more: one worker
23.4-27.2 CPU s a round against 18.8-21.4, each of three 7.2-8.2 against
6.4-8.9 (the last pair, one right after the other: 23.4 against 20.3,
7.4-7.8 against 6.4-6.6), so its share fell by its own cost. Hence the workers map theirs.

One arena: with a second one, which the calls' threads shared, 15% of the
driver's samples on three workers were the kernel's clearing and faulting
in of fresh pages, against 1% on one worker, where the main thread runs the
calls (perf, FedSS at Amazon-670K's shape, 4,000 clients, the calls in
turn); most likely an arena other than the main one, whose memory comes
in heaps of at most 64 MB mapped as needed and unmapped once free (glibc
2.36), took the calls' 30-35 MB answers in fresh pages. With one arena
those samples were gone, and the driver took 1.48-1.58 CPU s a round on
three workers instead of 1.83-2.13 (`benchmark_round_cost
--local_workers=1,3 --one_call_at_a_time`, two runs each, alternated;
on one worker 1.28-1.30 against 1.61-1.64, though perf's samples there
were alike), the tree alike, and FedAwS beside 3 shards on three workers
alike (1.09 against 1.10 CPU s, one run each); the driver's threads
spend their time waiting on the workers, not in malloc.

The driving process is tuned with `mallopt` while it has one thread: a
program that drives TFF rounds first thing (`scripts.cli`), any other when
it connects to a worker. glibc gives each new thread a malloc arena of its
own, up to 8 a core, and fixes that limit once reached: tuned only at its
first connection, the driver's threads (TensorFlow's, gRPC's, the calls')
had taken their arenas already (a process that has imported TensorFlow and
run one op has 9), which the arena limit then left, and with nothing
mapped each kept its own share of the calls' large buffers. FedSS
at Amazon-670K's shape, 4,000 clients on 3 workers, two runs each,
alternated: tuned at its start the driver peaked at 3.1-3.2 GB against
5.3-5.7, the tree at 8.8-8.9 against 11.0-11.3 GB, and the driver took
2.85-2.98 CPU s a round against 4.15-4.18; FedAwS beside 3 shards, 6.7-6.8
against 7.05-7.06 GB, its driver alike (0.76-0.82 against 0.79-0.81 s).
On one worker FedSS's tree and driver were alike (5.2-5.4 GB both ways;
median 2.15 against 2.11 CPU s over five runs each, two of the former's
reading 3.4-3.6).
A worker this project starts gets `SETTINGS` through glibc's environment
variables. A setting already in the environment wins: then none is changed
(one alone can be worse than none, as above).
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
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
SETTINGS = {  # name: (mallopt parameter, value); the driver's and the workers'.
    "MALLOC_MMAP_THRESHOLD_": (_M_MMAP_THRESHOLD, 32 * 1024 * 1024),
    "MALLOC_ARENA_MAX": (_M_ARENA_MAX, worker_threads.available_cores()),
    "MALLOC_TRIM_THRESHOLD_": (_M_TRIM_THRESHOLD, 256 * 1024 * 1024),
    "MALLOC_TOP_PAD_": (_M_TOP_PAD, 256 * 1024 * 1024),
}
# The driver's: the workers', but no allocation mapped and one arena.
DRIVER_SETTINGS = {**SETTINGS, "MALLOC_MMAP_MAX_": (_M_MMAP_MAX, 0),
                   "MALLOC_ARENA_MAX": (_M_ARENA_MAX, 1)}

_tuned = False


def _user_set(environment: Dict[str, str]) -> bool:
  return any(name in environment for name in DRIVER_SETTINGS)


def _is_glibc() -> bool:
  return platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def worker_environment() -> Dict[str, str]:
  """The environment a worker starts with: this one, plus the settings unless
  any of them is already set."""
  environment = dict(os.environ)
  if not _user_set(environment):
    environment.update({name: str(value) for name, (_, value) in SETTINGS.items()})
  return environment


def tune_this_process() -> bool:
  """Applies `DRIVER_SETTINGS` to this process's malloc (once; glibc only, and
  not when the environment sets any of them). Returns whether they are in
  effect."""
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
  _tuned = True
  return True
