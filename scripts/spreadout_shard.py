r"""A shard of FedAwS's approximate spreadout index, on a machine beside a TFF worker.

  python -m scripts.spreadout_shard --port=8100
then, from the machine that runs the training:
  python -m scripts.train_federated --task=xc --algorithm=fedaws \
      --spreadout_search=approximate --workers=10.0.0.5:8000,10.0.0.6:8000 \
      --spreadout_shards=10.0.0.5:8100,10.0.0.6:8100 --trusted_network ...
The training's server step then searches and moves the class table's rows on
the shards (row i on shard i mod their number) instead of on its own machine
(`class_neighbours.ApproximateNeighbours`). A shard holds derived state only:
a re-run fills it again from the checkpointed table. It listens on every
interface with neither encryption nor authentication (it takes arrays, never
code): keep the port on a private network or behind an SSH tunnel. One run
uses a shard at a time. Ctrl-C or SIGTERM stops it.
"""

import signal
import sys

from fed_retrieval.runtime import quiet_environment

quiet_environment.apply()

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top

from fed_retrieval.algorithms import class_neighbours  # pylint: disable=g-import-not-at-top
from fed_retrieval.runtime import array_service  # pylint: disable=g-import-not-at-top

_PORT = flags.DEFINE_integer("port", None, "The port the shard listens on.")
flags.mark_flag_as_required("port")


def _fail(message: str) -> None:
  print(f"error: {message}", file=sys.stderr)
  sys.exit(2)


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  if not 0 < _PORT.value < 65536:
    _fail(f"--port must lie in 1..65535, got {_PORT.value}")
  signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
  logging.set_verbosity(logging.WARNING)  # Not faiss's loading notes.
  try:
    array_service.serve(_PORT.value, class_neighbours.ListShard(), class_neighbours.SERVED,
                        ready=lambda: print(
                            f"spreadout index shard listening on port {_PORT.value}, "
                            "every interface; stop it with Ctrl-C or SIGTERM",
                            file=sys.stderr, flush=True))
  except OSError as e:
    _fail(f"--port={_PORT.value}: {e.strerror or e}; is the port in use?")
  except KeyboardInterrupt:
    pass


if __name__ == "__main__":
  app.run(main)
