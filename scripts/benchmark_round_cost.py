r"""Seconds per round and peak memory of FedSS (or full softmax) at a label-space size.

  python -m scripts.benchmark_round_cost --num_classes=100000 --algorithm=fedss \
      --num_negatives=500
Prints one JSON object (seconds per round, peak RSS, keys and bytes per
client). One configuration per process, so the peak RSS is its own; `make
benchmark-round-cost` runs 10k and 100k classes with the same key set.
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.algorithms import fedss
from fed_retrieval.reports import round_cost_benchmark

_NUM_CLASSES = flags.DEFINE_integer("num_classes", 10_000, "Classes (table rows).")
_ALGORITHM = flags.DEFINE_enum("algorithm", "fedss", list(fedss.ALGORITHMS),
                               "The FedSS algorithm to time.")
_NUM_NEGATIVES = flags.DEFINE_integer("num_negatives", 500,
                                      "Negatives each client samples.")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 20_000, "Sparse input features.")
_CLIENTS = flags.DEFINE_integer("clients_per_round", 100, "Clients in the round.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed rounds after one warm-up.")


def main(argv) -> None:
  del argv
  print(json.dumps(round_cost_benchmark.round_benchmark(
      _NUM_CLASSES.value, _ALGORITHM.value, _NUM_NEGATIVES.value, _NUM_FEATURES.value,
      _CLIENTS.value, repeats=_REPEATS.value), indent=2))


if __name__ == "__main__":
  cli.run(main)
