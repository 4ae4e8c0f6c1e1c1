"""A FedSS run whose class table is held by table servers (`served_table`,
`scripts.table_server`): the run here, to the last digit; a server that is
lost mid-run named in one line, the run resuming identically; its TFF worker
killed mid-run replaced, the run ending as the run here; a remote worker
killed mid-run named, and the re-run on the same servers resuming to the
run here."""

import os
import signal

import portpicker
import pytest

from fed_retrieval.algorithms import served_table
from tests.script_runs import gone
from tests.script_runs import results_of
from tests.script_runs import run_module
from tests.script_runs import start_module
from tests.script_runs import wait_for_round
from tests.script_runs import workers_of
from tests.server_runs import check_a_lost_server_resumes
from tests.server_runs import check_a_silent_server_is_one_line
from tests.server_runs import start_servers
from tests.server_runs import start_workers

QUICK_FEDSS = ["--task=xc", "--synthetic_xc=xc_tiny", "--algorithm=fedss",
               "--partition=k_labels_per_client", "--rounds=8", "--clients_per_round=20",
               "--eval_every=2", "--checkpoint_every=1", "--patience=0"]


def test_the_ranges_cover_the_table_in_order():
  assert served_table.range_bounds(10, 3).tolist() == [0, 3, 7, 10]
  assert served_table.range_bounds(2, 2).tolist() == [0, 1, 2]


@pytest.mark.runs_long
def test_a_run_on_table_servers_is_the_run_here_and_a_lost_server_resumes_identically(
    tmp_path):
  check_a_lost_server_resumes(tmp_path, QUICK_FEDSS, "scripts.table_server",
                              "table_servers", "table server")


def test_a_table_server_that_does_not_answer_is_one_line_and_exit_2(tmp_path):
  check_a_silent_server_is_one_line(tmp_path, QUICK_FEDSS, "table_servers",
                                    "table server")


@pytest.mark.runs_long
def test_a_worker_killed_beside_table_servers_is_replaced_and_the_run_ends_the_same(
    tmp_path):
  """The servers hold values in the dead worker; the new worker's round
  gets its rows anew from them, and the run ends as the run here."""
  # Rounds enough that the kill at round 3 lands before the end.
  args = [a for a in QUICK_FEDSS if not a.startswith("--rounds=")] + ["--rounds=20"]
  here = run_module("scripts.train_federated", *args, f"--output_dir={tmp_path}/here")
  assert here.returncode == 0, here.stderr[-3000:]
  ports = [portpicker.pick_unused_port() for _ in range(2)]
  servers = start_servers("scripts.table_server", *ports)
  try:
    run = start_module("scripts.train_federated", *args,
                       "--table_servers=" + ",".join(f"localhost:{p}" for p in ports),
                       f"--output_dir={tmp_path}/served")
    wait_for_round(str(tmp_path / "served"), 3)
    (worker,) = workers_of(run.pid)
    os.kill(worker, signal.SIGKILL)
    _, stderr = run.communicate(timeout=300)
    assert run.returncode == 0, stderr[-3000:]
    assert f"the TFF worker (pid {worker}) died (killed by signal SIGKILL" in stderr
    served = results_of(tmp_path / "served")
    assert served.pop("worker_restarts") == 1
    assert served["test"] == results_of(tmp_path / "here")["test"]
    assert gone({worker}, 1.0)
  finally:
    for server in servers:
      server.kill()
      server.wait()


@pytest.mark.runs_long
def test_a_remote_worker_killed_beside_table_servers_is_named_and_the_rerun_resumes(
    tmp_path):
  """The servers keep their channel to the worker's address: the worker
  started again there takes the re-run's rows from them."""
  here = run_module("scripts.train_federated", *QUICK_FEDSS,
                    f"--output_dir={tmp_path}/here")
  assert here.returncode == 0, here.stderr[-3000:]
  worker_ports, server_ports = ([portpicker.pick_unused_port() for _ in range(2)]
                                for _ in range(2))
  workers = start_workers(*worker_ports)
  servers = start_servers("scripts.table_server", *server_ports)
  args = [*QUICK_FEDSS, "--workers=" + ",".join(f"localhost:{p}" for p in worker_ports),
          "--table_servers=" + ",".join(f"localhost:{p}" for p in server_ports),
          f"--output_dir={tmp_path}/remote"]
  try:
    run = start_module("scripts.train_federated", *args)
    wait_for_round(str(tmp_path / "remote"), 3)
    workers[0].kill()  # The worker a 20-client round's one call goes to.
    assert run.wait(timeout=60) == 3
    port = worker_ports[0]
    assert run.stderr.read().strip().splitlines()[-1] == (
        f"error: the TFF worker at localhost:{port} stopped answering (its connection "
        f"failed); start it again (python -m scripts.worker --port={port}) and re-run "
        "the same command to resume from the last checkpoint")
    workers[0].wait()
    (workers[0],) = start_workers(port)
    resumed = run_module("scripts.train_federated", *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (results_of(tmp_path / "remote")["test"]
            == results_of(tmp_path / "here")["test"])
  finally:
    for process in workers + servers:
      process.kill()
      process.wait()
