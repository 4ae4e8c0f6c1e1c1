"""Several TFF workers (scripts.worker): the same results as one, a worker
lost mid-run, and what is refused."""

import os
import signal
import time

import portpicker
import pytest

from tests.script_runs import results_of
from tests.script_runs import run_code
from tests.script_runs import run_module
from tests.script_runs import run_script
from tests.script_runs import wait_for_round
from tests.script_runs import workers_of
from tests.server_runs import start_workers

THREE_SHARDS = ["--client_shards=3", "--rounds=10"]


def stop(worker):
  worker.send_signal(signal.SIGTERM)
  return worker.wait(timeout=30)


@pytest.mark.runs_long
def test_three_workers_equal_one_and_a_lost_worker_resumes_identically(tmp_path):
  alone = run_script(tmp_path / "alone", tmp_path / "cache", *THREE_SHARDS)
  ports = [portpicker.pick_unused_port() for _ in range(3)]
  workers = start_workers(*ports)
  assert alone.wait(timeout=600) == 0, alone.stderr.read()[-3000:]
  addresses = "--workers=" + ",".join(f"localhost:{port}" for port in ports)
  run = run_script(tmp_path / "three", tmp_path / "cache", *THREE_SHARDS, addresses)
  wait_for_round(str(tmp_path / "three"), 5)
  workers[1].kill()  # The worker dies with its script (parent-death signal).
  lost_at = time.monotonic()
  assert run.wait(timeout=60) == 3
  assert time.monotonic() - lost_at < 15
  error = run.stderr.read().strip().splitlines()
  assert error[-1] == (f"error: the TFF worker at localhost:{ports[1]} stopped answering "
                       "(its connection failed); start it again (python -m "
                       f"scripts.worker --port={ports[1]}) and re-run the same command to "
                       "resume from the last checkpoint")
  (workers[1],) = start_workers(ports[1])
  resumed = run_script(tmp_path / "three", tmp_path / "cache", *THREE_SHARDS, addresses)
  assert resumed.wait(timeout=600) == 0, resumed.stderr.read()[-3000:]
  assert results_of(tmp_path / "three")["test"] == results_of(tmp_path / "alone")["test"]
  for worker in workers:
    assert stop(worker) == 0
    assert "stopped" in worker.stderr.read()
    assert not workers_of(worker.pid)


def test_a_worker_that_dies_says_so_and_exits_3():
  port = portpicker.pick_unused_port()
  (worker,) = start_workers(port)
  (binary,) = workers_of(worker.pid)
  os.kill(binary, signal.SIGKILL)
  assert worker.wait(timeout=30) == 3
  assert f"port {port}) died unexpectedly (killed by signal SIGKILL" in worker.stderr.read()


# Connects to a worker, stops its process (SIGSTOP: the port stays open and
# the kernel still accepts TCP), then waits for the heartbeat to end it.
_STOPPED_WORKER = """
import os, signal, sys, time
from fed_retrieval.runtime import tff_runtime
workers = tff_runtime.RemoteWorkers([sys.argv[1]], heartbeat_seconds=1.0)
workers.connect()
os.kill(int(sys.argv[2]), signal.SIGSTOP)
print(time.monotonic(), flush=True)
time.sleep(60)
"""


def test_a_worker_whose_process_stops_is_named_within_two_heartbeats():
  port = portpicker.pick_unused_port()
  (worker,) = start_workers(port)
  (binary,) = workers_of(worker.pid)
  try:
    watched = run_code(_STOPPED_WORKER, f"localhost:{port}", str(binary), timeout=60)
    named_after = time.monotonic() - float(watched.stdout)
  finally:
    os.kill(binary, signal.SIGCONT)
  assert watched.returncode == 3, watched.stderr[-2000:]
  assert watched.stderr.strip().splitlines()[-1] == (
      f"error: the TFF worker at localhost:{port} stopped answering (no new "
      "connection within 1 s: its process stopped, or its host is down or "
      f"unreachable); start it again (python -m scripts.worker --port={port}) and "
      "re-run the same command to resume from the last checkpoint")
  assert 1 <= named_after < 2 * 1.0 + 1  # Two heartbeats, and the exit.
  assert stop(worker) == 0


@pytest.mark.parametrize("flags,message", [
    (["--workers=10.1.2.3:8000"], "error: --workers: 10.1.2.3:8000 is not on this "
                                  "machine, and its port is neither "
                                  "encrypted nor authenticated"),
    (["--workers=localhost:8000,localhost:8000"], "error: --workers: an address is "
                                                  "given twice"),
    (["--workers=localhost", ], "error: --workers: 'localhost' is not host:port"),
])
def test_refused_in_one_line_with_exit_2_writing_nothing(tmp_path, flags, message):
  result = run_module(
      "scripts.train_federated", *flags, f"--output_dir={tmp_path}/run",
      *([] if "--task=xc" in flags else [f"--cache_dir={tmp_path}/cache"]))
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1].startswith(message), result.stderr
  assert not os.path.exists(tmp_path / "run")
