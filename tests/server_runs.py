"""A training run on servers beside its workers (`scripts.worker`,
`scripts.spreadout_shard`, `scripts.table_server`): the run here, and one of
its servers lost mid-run, named in one line, started again and the run
resumed, the same results."""

import signal
import time

import portpicker

from fed_retrieval.runtime import array_service
from tests.script_runs import results_of
from tests.script_runs import run_module
from tests.script_runs import start_module
from tests.script_runs import wait_for_round


def start_workers(*ports):
  """One scripts.worker per port (forked children: `start_module`), started
  together, once each answers."""
  processes = [start_module("scripts.worker", f"--port={port}") for port in ports]
  for port, process in zip(ports, processes):
    deadline = time.monotonic() + 120
    while "\n" not in process.stderr.read() and process.poll() is None:
      assert time.monotonic() < deadline, "the worker never answered"
      time.sleep(0.05)
    output = process.stderr.read()
    assert f"listening on port {port}" in output.split("\n", 1)[0], output
  return processes


def start_servers(module: str, *ports):
  """`python -m module --port=P` for each port, once each answers."""
  servers = [start_module(module, f"--port={port}") for port in ports]
  for server, port in zip(servers, ports):
    array_service.await_answer(f"localhost:{port}", server)
  return servers


def check_a_lost_server_resumes(tmp_path, run_args, module: str, flag: str, what: str):
  """`scripts.train_federated run_args` here, then on two servers of `module`
  (given as --`flag`, each saying it is a `what`): the second killed at round
  3 ends the run in one line within 30 s (exit 3), and started again, the
  re-run resumes to the results here; SIGTERM then stops each server."""
  here = run_module("scripts.train_federated", *run_args, f"--output_dir={tmp_path}/here")
  assert here.returncode == 0, here.stderr[-3000:]
  ports = [portpicker.pick_unused_port() for _ in range(2)]
  servers = start_servers(module, *ports)
  addresses = f"--{flag}=" + ",".join(f"localhost:{p}" for p in ports)
  run = start_module("scripts.train_federated", *run_args, addresses,
                     f"--output_dir={tmp_path}/served")
  wait_for_round(str(tmp_path / "served"), 3)
  servers[1].kill()
  lost_at = time.monotonic()
  assert run.wait(timeout=60) == 3
  assert time.monotonic() - lost_at < 30
  assert run.stderr.read().strip().splitlines()[-1] == (
      f"error: the {what} at localhost:{ports[1]} stopped answering (its connection "
      f"failed); start it again (python -m {module} --port={ports[1]}) and re-run the "
      "same command to resume from the last checkpoint")
  servers[1:] = start_servers(module, ports[1])
  resumed = run_module("scripts.train_federated", *run_args, addresses,
                       f"--output_dir={tmp_path}/served")
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert results_of(tmp_path / "served")["test"] == results_of(tmp_path / "here")["test"]
  for server, port in zip(servers, ports):
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=10) == 0
    assert server.stderr.read().strip().splitlines() == [
        f"{what} listening on port {port}, every interface; stop it with Ctrl-C or "
        "SIGTERM"]


def check_a_silent_server_is_one_line(tmp_path, run_args, flag: str, what: str):
  """`scripts.train_federated run_args --flag=ADDRESS` where nothing answers:
  one line naming the flag and address, exit 2."""
  port = portpicker.pick_unused_port()
  result = run_module("scripts.train_federated", *run_args, f"--{flag}=localhost:{port}",
                      f"--output_dir={tmp_path}/run")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      f"error: --{flag}: no {what} answers at localhost:{port} (Connection refused)")
