r"""Seconds per round, process-tree memory and bytes of FedAwS or FedSS at a
label-space size.

  python -m scripts.benchmark_round_cost --algorithm=fedss --num_classes=100000 \
      --num_features=20000 --num_negatives=500
Prints one JSON object: seconds per round, `memory` (peak RSS of the process
tree, the TFF worker included), bytes down and up per client and their share
of the model. One configuration per process; `make benchmark-round-cost` runs
both algorithms at 10k, 100k and 670k classes (Amazon-670K's 135,909
features) with the same clients, and the contrasts at 100k.
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.algorithms import fedaws
from fed_retrieval.reports import page_flag
from fed_retrieval.reports import result_files
from fed_retrieval.reports import round_cost_benchmark

_NUM_CLASSES = flags.DEFINE_integer("num_classes", 10_000, "Classes (table rows).")
_ALGORITHM = flags.DEFINE_enum("algorithm", "fedss", list(round_cost_benchmark.ALGORITHMS),
                               "The FedAwS or FedSS algorithm to time.")
_BAG = flags.DEFINE_enum("bag", "selected", list(fedaws.BAGS),
                         "Clients receive their features' bag rows or the whole bag.")
_NUM_NEGATIVES = flags.DEFINE_integer("num_negatives", 500,
                                      "Negatives each FedSS client samples.")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 20_000, "Sparse input features.")
_CLIENTS = flags.DEFINE_integer("clients_per_round", 100, "Clients in the round.")
_CLASSES_PER_CLIENT = flags.DEFINE_integer("classes_per_client", 10,
                                           "Classes of each client's points.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed rounds after one warm-up.")


def main(argv) -> None:
  del argv
  report = round_cost_benchmark.round_benchmark(
      _NUM_CLASSES.value, _ALGORITHM.value, _BAG.value, _NUM_NEGATIVES.value,
      _NUM_FEATURES.value, _CLIENTS.value, classes_per_client=_CLASSES_PER_CLIENT.value,
      repeats=_REPEATS.value)
  print(json.dumps(report, indent=2))
  result_files.write_report_page(page_flag.PAGE.value, "Sub-model round cost", report)


if __name__ == "__main__":
  cli.run(main, help_groups=[page_flag.HELP_GROUP])
