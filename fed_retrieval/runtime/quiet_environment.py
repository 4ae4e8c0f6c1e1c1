"""The environment a program sets before TensorFlow or gRPC load: quiet logs.

TF reads its C++ log level when it first logs (at import), gRPC its settings
when it loads, so these must be in `os.environ` before either is imported:
`scripts.cli` applies them first thing, as does a test process that imports
the libraries for the scripts it forks (`tests/script_server.py`). A value
already in the environment wins.
"""

import os

DEFAULTS = {
    "TF_CPP_MIN_LOG_LEVEL": "3",
    # gRPC (TFF's worker channel) prints fork notices when the worker is
    # started from a threaded process; neither they nor its info logs help a user.
    "GRPC_ENABLE_FORK_SUPPORT": "false",
    "GRPC_VERBOSITY": "ERROR",
}


def apply() -> None:
  """Sets each of `DEFAULTS` that the environment does not set."""
  for name, value in DEFAULTS.items():
    os.environ.setdefault(name, value)
