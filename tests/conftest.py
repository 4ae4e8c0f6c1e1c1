"""Test session set-up: a private network and one TFF worker that never outlives it."""

from scripts import cli  # noqa: F401  First: isolates the network, quiets TF.

import signal

import pytest

# pytest-xdist's workers ignore SIGINT and children inherit that: a script a
# test interrupts would never see it, and the worker TFF's import-time default
# context starts would never stop on the SIGINT TFF sends it when that context
# is replaced (the test session would hang). Children get the default back.
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def tff_context():
  """The local TFF execution context; its worker is stopped after the session."""
  from fed_retrieval.runtime import tff_runtime  # pylint: disable=g-import-not-at-top
  with tff_runtime.local_execution_context() as worker:
    yield worker


@pytest.fixture(scope="session")
def tff_worker_environment(tff_context):
  """The environment the session's TFF worker runs with (from /proc)."""
  with open(f"/proc/{tff_context.pid}/environ", "rb") as f:
    return dict(entry.decode().split("=", 1) for entry in f.read().split(b"\0") if entry)


def pytest_collection_modifyitems(items):
  """Tests marked `runs_long` (script runs of 30 s and more) first, the rest
  in their order. `make test` distributes with --dist loadgroup: the modules
  marked `xdist_group` go whole to one worker (their module fixtures made
  once), largest first, then the other tests one by one in this order, so the
  long ones never end the session on one worker while the other idles."""
  items.sort(key=lambda item: item.get_closest_marker("runs_long") is None)
