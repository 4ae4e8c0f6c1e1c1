r"""A shard of FedAwS's approximate spreadout index, on a machine beside a TFF worker.

  python -m scripts.spreadout_shard --port=8100
then, from the machine that runs the training:
  python -m scripts.train_federated --task=xc --algorithm=fedaws \
      --spreadout_search=approximate --workers=10.0.0.5:8000,10.0.0.6:8000 \
      --spreadout_shards=10.0.0.5:8100,10.0.0.6:8100 --trusted_network ...
The training's server step then searches and moves the class table's rows on
the shards (each round's moved rows split among them in ranges) instead of on
its own machine (`class_neighbours.ApproximateNeighbours`). A shard holds
derived state only: a re-run fills it again from the checkpointed table. It
listens on every interface with neither encryption nor authentication (it
takes arrays, never code): keep the port on a private network or behind an
SSH tunnel. One run uses a shard at a time. Ctrl-C or SIGTERM stops it.
"""

from fed_retrieval.runtime import quiet_environment

quiet_environment.apply()

from absl import app  # pylint: disable=g-import-not-at-top
from absl import flags  # pylint: disable=g-import-not-at-top
from absl import logging  # pylint: disable=g-import-not-at-top

from fed_retrieval.algorithms import class_neighbours  # pylint: disable=g-import-not-at-top
from fed_retrieval.runtime import array_service  # pylint: disable=g-import-not-at-top

_PORT = flags.DEFINE_integer("port", None, "The port the shard listens on.")
flags.mark_flag_as_required("port")


def main(argv) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
  logging.set_verbosity(logging.WARNING)  # Not faiss's loading notes.
  array_service.serve_until_stopped(_PORT.value, class_neighbours.ListShard(),
                                    class_neighbours.SERVED, "spreadout index shard")


if __name__ == "__main__":
  app.run(main)
