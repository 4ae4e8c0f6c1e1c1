"""Helpers for tests that run the training scripts as real processes."""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_SERVER = None
SMALL_RUN = ["--synthetic=small", "--loss=hinge_spreadout", "--rounds=8",
             "--clients_per_round=10", "--client_learning_rate=0.5",
             "--eval_every=4", "--checkpoint_every=2", "--patience=0", "--seed=3"]


def _server():
  global _SERVER
  if _SERVER is None:
    from tests import script_server  # pylint: disable=g-import-not-at-top  (imports us)
    _SERVER = script_server.ScriptServer()
  return _SERVER


def run_module(module, *args, **options):
  """`python -m module args`, captured, in a child forked from a process that
  has imported the libraries (`tests.script_server`; `options` are its `run`'s)."""
  return _server().run(args, module=module, **options)


def start_module(module, *args, **options):
  """Starts `python -m module args` as `run_module` runs it: a Popen-like handle."""
  return _server().start(args, module=module, **options)


def run_code(code, *args, **options):
  """`python -c code args`, as `run_module` runs a module."""
  return run_module(None, *args, code=code, **options)


def run_script(output_dir, cache, *extra, forked=True):
  """Starts scripts.train_federated on the small preset: a forked child
  (`tests.script_server`), or not `forked` a new interpreter (whose teardown
  a test checks)."""
  args = [*SMALL_RUN, *extra, f"--output_dir={output_dir}", f"--cache_dir={cache}"]
  if forked:
    return start_module("scripts.train_federated", *args)
  return subprocess.Popen([sys.executable, "-m", "scripts.train_federated", *args],
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def alive(pid: int) -> bool:
  """Whether process `pid` exists and is not a zombie."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().split()[2] != "Z"
  except FileNotFoundError:
    return False


def gone(pids, seconds: float = 20.0) -> bool:
  """Whether every process of `pids` is gone within `seconds`."""
  deadline = time.monotonic() + seconds
  while any(alive(pid) for pid in pids):
    if time.monotonic() > deadline:
      return False
    time.sleep(0.05)
  return True


def worker_pids():
  """The pids of every running TFF worker_binary."""
  pids = set()
  for pid in os.listdir("/proc"):
    if pid.isdigit():
      try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
          if b"worker_binary" in f.read():
            pids.add(int(pid))
      except OSError:
        pass
  return pids


def workers_of(parent_pid):
  """The TFF workers that process `parent_pid` started."""
  children = set()
  for pid in worker_pids():
    try:
      with open(f"/proc/{pid}/stat") as f:
        if int(f.read().rsplit(")", 1)[1].split()[1]) == parent_pid:
          children.add(pid)
    except OSError:
      pass
  return children


def results_of(output_dir):
  """The run's results.json."""
  with open(os.path.join(output_dir, "results.json")) as f:
    return json.load(f)


def wait_for_round(output_dir, round_num, timeout=600):
  """Blocks until the run's metrics.csv has a row for `round_num`."""
  metrics = os.path.join(output_dir, "metrics.csv")
  deadline = time.monotonic() + timeout
  while time.monotonic() < deadline:
    if os.path.isfile(metrics) and f"\n{round_num}," in open(metrics).read():
      return
    time.sleep(0.05)
  raise TimeoutError(f"{output_dir} never reached round {round_num}")
