"""The TFF worker's ops share the cores among a round's concurrent client
calls (`fed_retrieval/runtime/worker_threads.py`)."""

import os

import pytest

from fed_retrieval.runtime import worker_threads


@pytest.mark.parametrize("cores,threads", [(1, 1), (2, 1), (3, 1), (4, 2), (16, 8)])
def test_each_concurrent_client_call_gets_its_share_of_the_cores(cores, threads):
  assert worker_threads.intra_op_threads(cores) == threads


def test_the_share_is_of_the_cores_this_process_may_run_on():
  allowed = os.sched_getaffinity(0)
  os.sched_setaffinity(0, {min(allowed)})  # This thread, pinned to one core.
  try:
    assert worker_threads.available_cores() == 1
    assert worker_threads.intra_op_threads() == 1
  finally:
    os.sched_setaffinity(0, allowed)
  assert worker_threads.available_cores() == len(allowed)


def test_environment_gets_the_threads_unless_it_sets_them():
  environment = worker_threads.with_intra_op_threads({"PATH": "/bin"})
  assert environment == {"PATH": "/bin",
                         "TF_NUM_INTRAOP_THREADS": str(worker_threads.intra_op_threads())}
  mine = {"PATH": "/bin", "TF_NUM_INTRAOP_THREADS": "7"}  # The user's choice wins.
  assert worker_threads.with_intra_op_threads(mine) == mine


def test_session_worker_runs_with_its_share(tff_worker_environment):
  expected = os.environ.get(worker_threads.VARIABLE,
                            str(worker_threads.intra_op_threads()))
  assert tff_worker_environment[worker_threads.VARIABLE] == expected
