r"""A range of a sub-model round's class table, on a machine beside a TFF worker.

  python -m scripts.table_server --port=8200
then, from the machine that runs the training:
  python -m scripts.train_federated --task=xc --algorithm=fedss \
      --workers=10.0.0.5:8000,10.0.0.6:8000 \
      --table_servers=10.0.0.5:8200,10.0.0.6:8200 --trusted_network ...
The class table's rows are then split in ranges over the servers, each
sending the workers the rows of its range their calls read and averaging
the calls' deltas of them, instead of the training's machine
(`served_table`). A server holds a copy: the checkpoints keep the table, and
a re-run loads it again. It listens on every interface with neither
encryption nor authentication (it takes arrays, never code) and reaches the
workers at the addresses the training gives it: keep both on a private
network. One run uses a server at a time. It imports NumPy and gRPC, not
TensorFlow. Ctrl-C or SIGTERM stops it.
"""

from fed_retrieval.runtime import quiet_environment

quiet_environment.apply()

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top

from fed_retrieval.algorithms import table_range  # pylint: disable=g-import-not-at-top
from fed_retrieval.runtime import array_service  # pylint: disable=g-import-not-at-top

_PORT = flags.DEFINE_integer("port", None, "The port the server listens on.")
flags.mark_flag_as_required("port")


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  array_service.serve_until_stopped(_PORT.value, table_range.TableRange(),
                                    table_range.SERVED, "table server")


if __name__ == "__main__":
  app.run(main)
