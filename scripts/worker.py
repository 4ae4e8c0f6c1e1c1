r"""A TFF worker that federated runs on other machines (or this one) train on.

  python -m scripts.worker --port=8000 [--log=worker.log]
then, from the machine that runs the training:
  python -m scripts.train_federated --workers=localhost:8000,localhost:8001 ...
  python -m scripts.train_federated --workers=10.0.0.5:8000 --trusted_network ...
TFF's C++ worker_binary listens on --port on every interface, with neither
encryption nor authentication: keep the port on a private network, or reach
it through an SSH tunnel (README, "Several workers"). It lives and dies with
this program: Ctrl-C or SIGTERM stops it (exit 0), it never outlives this
process, and if it dies on its own this program says so in one line and
exits with code 3.
"""

import signal
import sys
import threading

from scripts import cli  # First: quiet TF, clean errors (the host's network kept).
from absl import flags

from fed_retrieval.runtime import tff_runtime

_PORT = flags.DEFINE_integer("port", None, "The port the worker listens on.")
_LOG = flags.DEFINE_string("log", None,
                           "Append the worker's own output here (default: discard it).")
flags.mark_flag_as_required("port")


def main(argv) -> None:
  del argv
  if not 0 < _PORT.value < 65536:
    raise ValueError(f"--port must lie in 1..65535, got {_PORT.value}")
  stopped = threading.Event()
  for signum in (signal.SIGTERM, signal.SIGINT):
    signal.signal(signum, lambda *_: stopped.set())
  worker = tff_runtime.LocalWorker(_LOG.value, port=_PORT.value)
  try:
    worker.start()
  except RuntimeError as e:
    raise ValueError(f"--port={_PORT.value}: the worker did not start ({e}); is the "
                     "port in use?") from e
  print(f"TFF worker (pid {worker.pid}) listening on port {_PORT.value}, every "
        "interface; stop it with Ctrl-C or SIGTERM", file=sys.stderr, flush=True)
  while not stopped.wait(0.5):  # A worker that dies ends the program (exit 3).
    pass
  worker.stop()
  print(f"TFF worker on port {_PORT.value} stopped", file=sys.stderr, flush=True)


if __name__ == "__main__":
  cli.run(main)
