"""Test session set-up: a private network and one TFF worker that never outlives it."""

from scripts import cli  # noqa: F401  First: isolates the network, quiets TF.

import pytest


@pytest.fixture(scope="session")
def tff_context():
  """The local TFF execution context; its worker is stopped after the session."""
  from fed_retrieval.runtime import tff_runtime  # pylint: disable=g-import-not-at-top
  with tff_runtime.local_execution_context() as worker:
    yield worker
