"""Faults real runs meet, each injected for real: a dead worker, a torn
checkpoint, a second run on the same directory, a read-only directory."""

import csv
import glob
import os
import re
import signal
import time

import pytest

from fed_retrieval.training import checkpoints
from tests.script_runs import gone
from tests.script_runs import results_of
from tests.script_runs import SMALL_RUN
from tests.script_runs import run_code
from tests.script_runs import run_script
from tests.script_runs import wait_for_round
from tests.script_runs import workers_of

# Each test runs the script at least once; all on one pytest-xdist worker
# (`make test` distributes by --dist loadgroup), which runs `uninterrupted` once.
pytestmark = [pytest.mark.runs_long, pytest.mark.xdist_group("faults")]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def uninterrupted(cache_dir, tmp_path_factory):
  """The results of the small run with nothing going wrong."""
  output_dir = str(tmp_path_factory.mktemp("uninterrupted"))
  process = run_script(output_dir, cache_dir, forked=False)
  _, stderr = process.communicate(timeout=600)
  assert process.returncode == 0, stderr[-3000:]
  # A clean exit: no finalizer's traceback once the worker has stopped (the
  # interpreter's teardown, which only a real process runs).
  assert "Traceback" not in stderr and "Connection refused" not in stderr
  return results_of(output_dir)


def _not_progress(stderr):
  """stderr's lines but the task's progress lines ('MovieLens: reading ...')."""
  return [line for line in stderr.strip().splitlines()
          if not line.startswith("MovieLens: ")]


def finish(output_dir, cache_dir):
  process = run_script(output_dir, cache_dir)
  _, stderr = process.communicate(timeout=600)
  assert process.returncode == 0, stderr[-3000:]
  return stderr


def test_a_run_meeting_three_faults_in_turn_resumes_each_time_to_the_same_results(
    cache_dir, uninterrupted, tmp_path):
  """One run directory, three faults one after another, each ending the run
  that a re-run of the same command resumes: the worker killed with no
  restart allowed, Ctrl-C, and a SIGKILL of the program whose newest
  checkpoint is then torn. The results are those of the run without faults."""
  # The worker dies and no restart is allowed: the program ends, bounded.
  process = run_script(tmp_path, cache_dir, "--max_worker_restarts=0")
  wait_for_round(tmp_path, 3)
  (worker,) = workers_of(process.pid)
  os.kill(worker, signal.SIGKILL)
  _, stderr = process.communicate(timeout=60)
  assert process.returncode == 3
  last_line = stderr.strip().splitlines()[-1]
  assert f"TFF worker (pid {worker}" in last_line and "re-run" in last_line
  assert not os.path.exists(os.path.join(tmp_path, "results.json"))

  # Ctrl-C ends the re-run at once, in one line.
  process = run_script(tmp_path, cache_dir)
  wait_for_round(tmp_path, 5)
  workers = workers_of(process.pid)
  process.send_signal(signal.SIGINT)
  _, stderr = process.communicate(timeout=60)
  assert re.search(r"federated hinge_spreadout: resuming from round [2-4] in", stderr)
  assert process.returncode == 130
  last = stderr.strip().splitlines()[-1]
  assert last.startswith("interrupted at federated hinge_spreadout: round ")
  assert last.endswith("/8; re-run the same command to resume from its last checkpoint")
  assert "Traceback" not in stderr
  assert workers and gone(workers, 1.0), "a TFF worker outlived its program"

  # SIGKILL of the next re-run once it logged a round of its own (the one
  # Ctrl-C ended may have finished round 6), then its newest checkpoint torn.
  with open(os.path.join(tmp_path, "metrics.csv")) as f:
    logged = max(int(r["round"]) for r in csv.DictReader(f))
  process = run_script(tmp_path, cache_dir)
  wait_for_round(tmp_path, logged + 1)
  workers = workers_of(process.pid)
  assert workers
  os.kill(process.pid, signal.SIGKILL)
  process.wait()
  assert gone(workers, 1.0), "a TFF worker outlived its program"
  assert not os.path.exists(os.path.join(tmp_path, "results.json"))
  directory = os.path.join(tmp_path, "checkpoints")
  # A kill that lands while the next checkpoint is written leaves it staged,
  # never under its final name.
  names = os.listdir(directory)
  assert all(name.startswith(("program_state_", checkpoints.STAGING_PREFIX))
             for name in names), names
  versions = sorted(int(name.rsplit("_", 1)[1]) for name in names
                    if name.startswith("program_state_"))
  # The first and the two newest of a checkpoint every 2 rounds: [0, 2, 4],
  # or [0, 4, 6] when the kill came after round 6's checkpoint.
  newest_round = versions[-1]
  assert newest_round >= 4 and newest_round % 2 == 0, names
  assert versions == [0, newest_round - 2, newest_round], names
  newest = f"program_state_{versions[-1]}"
  (variables,) = glob.glob(os.path.join(directory, newest, "variables",
                                        "variables.data-*"))
  with open(variables, "r+b") as f:  # Tear it, as a kill mid-write would.
    f.truncate(os.path.getsize(variables) // 2)

  stderr = finish(tmp_path, cache_dir)
  assert f"unreadable_{newest}" in stderr
  assert os.path.isdir(os.path.join(directory, f"unreadable_{newest}"))
  assert "round 8/8, loss" in stderr and "left" in stderr
  assert results_of(tmp_path) == uninterrupted
  with open(os.path.join(tmp_path, "metrics.csv")) as f:  # Each round once.
    assert [int(r["round"]) for r in csv.DictReader(f)] == list(range(1, 9))


def a_new_worker(process, old, timeout=120):
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    workers = workers_of(process.pid) - {old}
    if workers:
      return workers.pop()
    time.sleep(0.05)
  raise AssertionError("no new worker was started")


def test_a_worker_that_dies_twice_is_replaced_and_the_run_ends_the_same(
    cache_dir, uninterrupted, tmp_path):
  process = run_script(tmp_path, cache_dir)
  wait_for_round(tmp_path, 3)
  (first,) = workers_of(process.pid)
  os.kill(first, signal.SIGSEGV)  # A crash of the runtime...
  second = a_new_worker(process, first)
  wait_for_round(tmp_path, 5)
  os.kill(second, signal.SIGKILL)  # ...then what the out-of-memory killer sends.
  third = a_new_worker(process, second)
  _, stderr = process.communicate(timeout=600)
  assert process.returncode == 0, stderr[-3000:]
  restarts = [line for line in stderr.splitlines() if "died" in line]
  assert len(restarts) == 2, stderr[-3000:]
  assert f"(pid {first}) died (killed by signal SIGSEGV, a crash inside" in restarts[0]
  assert f"(pid {second}) died (killed by signal SIGKILL, most often the kernel's " \
         "out-of-memory killer" in restarts[1]
  # Each resumes from the last checkpoint (every 2 rounds) before its kill,
  # which came once round 3, then round 5, was seen (a round may finish
  # before the kill lands: both may resume from round 4).
  resumed = [re.search(r"restart (\d) of 3: a new worker resumes from round (\d+)",
                       line).groups() for line in restarts]
  assert [count for count, _ in resumed] == ["1", "2"]
  first_round, second_round = (int(round_num) for _, round_num in resumed)
  assert 2 <= first_round <= second_round and second_round >= 4
  assert first_round % 2 == second_round % 2 == 0
  results = results_of(tmp_path)
  assert results.pop("worker_restarts") == 2
  assert results == {k: v for k, v in uninterrupted.items() if k != "worker_restarts"}
  assert gone({first, second, third}, 1.0)  # Nothing outlives the run.


def test_a_second_run_on_the_same_directory_is_refused(cache_dir, tmp_path):
  long_run = "--rounds=500"  # Still running when the second one starts.
  first = run_script(tmp_path, cache_dir, long_run)
  wait_for_round(tmp_path, 1)
  second = run_script(tmp_path, cache_dir, long_run)
  _, stderr = second.communicate(timeout=300)
  assert first.poll() is None, "the first run should still be running"
  assert second.returncode == 2
  assert _not_progress(stderr) == [
      f"error: --output_dir={tmp_path} is in use by another run (pid {first.pid}); "
      "wait for it to finish or use another --output_dir"]
  first.send_signal(signal.SIGINT)
  first.communicate(timeout=120)
  with open(os.path.join(tmp_path, "metrics.csv")) as f:
    rounds = [int(row["round"]) for row in csv.DictReader(f)]
  assert rounds == list(range(1, len(rounds) + 1))  # One writer only.


# A forked child in a mount namespace of its own, where `path` is a read-only
# file system (which even root cannot write), runs the script.
_READ_ONLY_RUN = """
import ctypes, runpy, sys
libc = ctypes.CDLL(None, use_errno=True)
path = sys.argv.pop(1).encode()
if (libc.unshare(0x00020000) or  # CLONE_NEWNS
    libc.mount(b"none", b"/", None, 0x4000 | 0x40000, None) or  # MS_REC | MS_PRIVATE
    libc.mount(b"tmpfs", path, b"tmpfs", 0x1, None)):  # MS_RDONLY
  sys.exit(f"no private read-only mount: errno {ctypes.get_errno()}")
runpy.run_module("scripts.train_federated", run_name="__main__", alter_sys=True)
"""


def test_a_read_only_output_directory_is_one_clear_error(cache_dir, tmp_path):
  read_only = tmp_path / "read_only"
  read_only.mkdir()
  result = run_code(_READ_ONLY_RUN, str(read_only), *SMALL_RUN,
                    f"--output_dir={read_only}/run", f"--cache_dir={cache_dir}")
  if "no private read-only mount" in result.stderr:
    pytest.skip(result.stderr.strip())
  assert result.returncode == 2
  assert _not_progress(result.stderr) == [
      f"error: --output_dir={read_only}/run: cannot write {read_only}/run: "
      "the file system is read-only"]
