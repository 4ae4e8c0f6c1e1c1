"""glibc malloc keeps the rounds' large buffers: fewer page faults, in this
process and in the TFF worker (`fed_retrieval/runtime/malloc_tuning.py`)."""

import importlib.util
import os
import subprocess
import sys

import pytest

from fed_retrieval.runtime import malloc_tuning
from fed_retrieval.runtime import worker_threads
from scripts import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Allocates, fills and frees buffers of argv[2] MB as a round's transfers do;
# prints the page faults per buffer.
PROGRAM = """
import resource, sys
import numpy as np
from fed_retrieval.runtime import malloc_tuning
if sys.argv[1] == "tuned":
  assert malloc_tuning.tune_this_process()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
  buffer = np.ones(int(sys.argv[2]) * 250_000, np.float32)
  copy = buffer.tobytes()
  del buffer, copy
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 20)
"""


def _printed(program: str, *args) -> str:
  """The last word `program` prints, run in a fresh Python without any of
  the malloc settings in its environment."""
  environment = {k: v for k, v in os.environ.items()
                 if k not in malloc_tuning.USERS_OWN}
  result = subprocess.run([sys.executable, "-c", program, *map(str, args)], cwd=ROOT,
                          env=environment, capture_output=True, text=True, timeout=300,
                          check=True)
  return result.stdout.split()[-1]


def _faults_per_buffer(mode: str, megabytes: int) -> float:
  return float(_printed(PROGRAM, mode, megabytes))


@pytest.mark.parametrize("megabytes", [20, 40])  # Below glibc's largest mmap threshold, above.
def test_tuned_process_stops_faulting_its_buffers_in_again(megabytes):
  default = _faults_per_buffer("default", megabytes)
  tuned = _faults_per_buffer("tuned", megabytes)
  # A buffer of 20 MB is 4,883 pages: by default each one faults in again.
  assert default > 200 * megabytes
  assert tuned < 0.2 * default


HUGEPAGES = """
import sys
from fed_retrieval.runtime import malloc_tuning
if sys.argv[1] == "tuned":
  assert malloc_tuning.tune_this_process()
import numpy
print(numpy.core.multiarray._get_madvise_hugepage())
"""


def test_tuned_process_keeps_numpy_from_advising_huge_pages(monkeypatch):
  monkeypatch.delenv(malloc_tuning.NUMPY_HUGEPAGES, raising=False)
  assert _printed(HUGEPAGES, "default") == "True"  # NumPy's own, on Linux >= 4.6.
  assert _printed(HUGEPAGES, "tuned") == "False"
  monkeypatch.setenv(malloc_tuning.NUMPY_HUGEPAGES, "1")  # The user's choice wins.
  assert _printed(HUGEPAGES, "tuned") == "True"


def test_worker_environment_adds_the_settings_unless_any_is_set(monkeypatch):
  for name in malloc_tuning.USERS_OWN:
    monkeypatch.delenv(name, raising=False)
  environment = malloc_tuning.worker_environment()
  assert environment["MALLOC_MMAP_MAX_"] == "0"
  assert environment["MALLOC_TRIM_THRESHOLD_"] == str(256 * 1024 * 1024)
  assert environment["MALLOC_TOP_PAD_"] == str(256 * 1024 * 1024)
  assert environment["MALLOC_ARENA_MAX"] == str(worker_threads.available_cores())
  assert environment["PATH"] == os.environ["PATH"]
  monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "0")  # The user's choice wins.
  environment = malloc_tuning.worker_environment()
  assert environment["MALLOC_TRIM_THRESHOLD_"] == "0"
  assert "MALLOC_MMAP_MAX_" not in environment and "MALLOC_TOP_PAD_" not in environment
  monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_")
  monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "65536")  # Mapping chosen: not undone.
  assert "MALLOC_MMAP_MAX_" not in malloc_tuning.worker_environment()


def test_session_worker_runs_with_the_settings(tff_worker_environment):
  if any(name in os.environ for name in malloc_tuning.USERS_OWN):
    pytest.skip("the environment sets malloc itself")
  for name, (_, value) in malloc_tuning.SETTINGS.items():
    assert tff_worker_environment[name] == str(value)


# Imports `scripts.cli` as the program argv[1] would, then has argv[2]
# threads malloc at once (each takes an arena of its own, up to glibc's
# limit: 8 a core by default); prints how many arenas malloc then has.
ARENAS = """
import ctypes, os, sys, tempfile, threading, types
sys.modules["__main__"].__spec__ = types.SimpleNamespace(name=sys.argv[1])
from scripts import cli
count = int(sys.argv[2])
barrier = threading.Barrier(count)
def allocate():
  buffer = bytearray(1000)
  barrier.wait()
threads = [threading.Thread(target=allocate) for _ in range(count)]
for thread in threads:
  thread.start()
for thread in threads:
  thread.join()
libc = ctypes.CDLL(None)
libc.fdopen.restype = ctypes.c_void_p
with tempfile.TemporaryFile("w+") as report:
  stream = libc.fdopen(os.dup(report.fileno()), b"w")
  libc.malloc_info(0, ctypes.c_void_p(stream))
  libc.fclose(ctypes.c_void_p(stream))
  report.seek(0)
  print(report.read().count("<heap nr="))
"""


def _arenas(program: str, threads: int) -> int:
  return int(_printed(ARENAS, program, threads))


def test_a_program_that_drives_rounds_is_tuned_before_its_threads_take_arenas():
  cores = worker_threads.available_cores()
  threads = 2 * cores  # Untuned: an arena each, and the main one.
  assert _arenas("scripts.train_federated", threads) == 1  # Tuned: the main one.
  assert _arenas("scripts.train_centralized", threads) > cores  # As glibc has it.
  # Each program named is one: a renamed script would silently go untuned.
  assert all(importlib.util.find_spec(name) for name in cli._DRIVES_ROUNDS)  # pylint: disable=protected-access
