"""The TFF worker never outlives its program and is unreachable from outside."""

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tests import script_runs


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Starts a worker, runs one computation, prints the worker's pid, then waits.
PROGRAM = """
import sys, time
from scripts import cli
from fed_retrieval.runtime import tff_runtime
import numpy as np
import tensorflow_federated as tff
worker = tff_runtime.set_local_execution_context()
@tff.federated_computation(tff.FederatedType(np.float32, tff.CLIENTS))
def mean(x):
  return tff.federated_mean(x)
assert abs(mean([1.0, 2.0, 6.0]) - 3.0) < 1e-6
print(worker.pid, flush=True)
if sys.argv[1] == "wait":
  time.sleep(600)
"""


@pytest.mark.parametrize("ending", ["exit", "sigkill", "sigint"])
def test_worker_dies_with_its_program(ending):
  # An exit is checked in a real process (the interpreter's teardown runs);
  # a kill and a Ctrl-C in a forked child (`start_module`), whose stdout is a
  # pipe as well.
  if ending == "exit":
    process = subprocess.Popen([sys.executable, "-c", PROGRAM, "exit"],
                               cwd=ROOT, stdout=subprocess.PIPE, text=True)
    stdout = process.stdout
  else:
    process = script_runs.start_module(None, "wait", code=PROGRAM, pipes=True)
    process.pipe_in.close()
    stdout = process.pipe_out
  try:
    worker_pid = int(stdout.readline())
    if ending != "exit":  # An exiting program may already have stopped it.
      assert script_runs.alive(worker_pid)
    if ending == "sigkill":
      process.kill()
    elif ending == "sigint":
      process.send_signal(signal.SIGINT)
    # The pipe closes only once no process holds it: the worker must not.
    assert stdout.read() == ""
    process.wait(timeout=60)
    assert script_runs.gone([worker_pid]), f"worker {worker_pid} outlived its program"
  finally:
    process.kill()
    process.wait()
    stdout.close()


def test_session_worker_computes_and_network_is_loopback_only(tff_context):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

  @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
  def total(x):
    return tff.federated_sum(x)

  assert total([1, 2, 3]) == 6
  assert script_runs.alive(tff_context.pid)
  assert [name for _, name in socket.if_nameindex()] == ["lo"]


def test_contexts_sharing_a_lock_take_their_calls_in_turn():
  """Two workers' calls from two threads at once: with `OneCallAtATime` none
  overlaps another; each still reaches its own context, factory included."""
  from fed_retrieval.runtime import tff_runtime  # pylint: disable=g-import-not-at-top

  running, overlaps, seen = [], [], []

  class Slow:
    executor_factory = "factory"

    def invoke(self, computation, arg):
      running.append(arg)
      overlaps.append(len(running) > 1)
      time.sleep(0.05)
      seen.append((computation, arg))
      running.remove(arg)
      return arg

  lock = threading.Lock()
  contexts = [tff_runtime.OneCallAtATime(Slow(), lock) for _ in range(2)]
  threads = [threading.Thread(
      target=lambda c=c, i=i: [c.invoke("f", (i, k)) for k in range(3)])
             for i, c in enumerate(contexts)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert len(seen) == 6 and not any(overlaps)
  assert contexts[0].executor_factory == "factory"


# The training loop prints progress lines without pause while a watcher
# thread ends the program with `exit_with`.
_EXIT_BESIDE_PRINTS = """
import threading, time
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import progress as lines
def progress():
  while True:
    lines.ProgressLines("federated", "round", 10).report(5, "loss 1.7449")
threading.Thread(target=progress, daemon=True).start()
time.sleep(0.02)
threading.Thread(target=tff_runtime.exit_with, args=("error: worker lost",)).start()
time.sleep(60)
"""


def test_the_exit_line_is_the_last_line_though_another_thread_prints():
  for _ in range(10):
    ended = script_runs.run_code(_EXIT_BESIDE_PRINTS, timeout=60)
    lines = ended.stderr.splitlines()
    assert ended.returncode == 3
    assert lines[0].startswith("federated: round 5/10, loss 1.7449; 0 s elapsed")
    assert lines[-1] == "error: worker lost"
