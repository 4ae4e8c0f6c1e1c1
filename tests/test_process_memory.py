"""ProcessTreePeak counts the memory of child processes (the TFF worker's)."""

import contextlib
import json
import os
import subprocess
import sys
import time

import psutil

from fed_retrieval.runtime import process_memory

CHILD_MB = 300
# A child that fills CHILD_MB of memory, says so, and holds it until killed.
_CHILD = (f"import sys, time\nblock = b'\\x01' * ({CHILD_MB} * 1024 * 1024)\n"
          "print('ready', flush=True)\ntime.sleep(60)\n")


@contextlib.contextmanager
def _child_holding_memory():
  """A child process holding CHILD_MB, from its start until the block ends."""
  child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE,
                           text=True)
  try:
    assert child.stdout.readline().strip() == "ready"
    yield
  finally:
    child.kill()
    child.wait()


def test_the_peak_counts_a_child_process():
  own_mb = psutil.Process().memory_info().rss / process_memory.MB
  with process_memory.ProcessTreePeak(interval_seconds=0.01,
                                     tree_interval_seconds=0.01) as peak:
    with _child_holding_memory():
      peak_before_exit = peak.peak_rss_mb
      time.sleep(0.1)  # At least one sample with the child's block resident.
  report = peak.report()
  assert report["processes"] >= 2
  # The child's block and this process (a sampled sum, so not above both
  # high-water marks).
  assert report["peak_rss_mb"] >= own_mb + 0.9 * CHILD_MB
  assert report["peak_rss_mb"] <= report["peak_rss_mb_sum_of_high_water_marks"] + 1
  assert peak_before_exit <= report["peak_rss_mb"] + 0.05  # The report rounds to 0.1 MB.


def test_the_peak_counts_this_process():
  # (A test session may already hold a TFF worker child: no count of processes.)
  with process_memory.ProcessTreePeak() as peak:
    block = b"\x01" * (50 * 1024 * 1024)
  del block
  report = peak.report()
  assert report["processes"] >= 1
  assert 50 <= report["peak_rss_mb"] <= report["peak_rss_mb_sum_of_high_water_marks"]


def test_the_tree_is_listed_every_tree_interval_and_the_sampling_cpu_is_told():
  """A child started in the block is not sampled before the tree is listed
  again; the sampling thread's CPU is counted, part of this process's."""
  cpu_before = time.process_time()
  with process_memory.ProcessTreePeak(interval_seconds=0.001,
                                     tree_interval_seconds=60) as peak:
    at_start = peak.peak_rss_mb  # The tree as it was (a test run's TFF worker too).
    with _child_holding_memory():
      time.sleep(0.3)
      during = peak.sampler_cpu_seconds()
  assert peak.peak_rss_mb < at_start + 0.5 * CHILD_MB  # Never listed while it ran.
  assert 0 < during <= peak.sampler_cpu_seconds()
  assert peak.sampler_cpu_seconds() <= time.process_time() - cpu_before


def test_the_tree_peak_tool_reports_a_command_and_its_exit_code():
  tool = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "tools", "tree_peak.py")
  result = subprocess.run(
      [sys.executable, tool, sys.executable, "-c",
       "import sys, time; block = b'\\x01' * (200 * 1024 * 1024); time.sleep(0.5); "
       "sys.exit(3)"], capture_output=True, text=True, timeout=120)
  assert result.returncode == 3
  report = json.loads(result.stderr.strip().splitlines()[-1])
  assert report["returncode"] == 3 and report["processes"] >= 2
  assert report["peak_rss_mb"] >= 200
