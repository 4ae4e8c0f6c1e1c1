r"""Seconds and peak memory of FedAwS's server spreadout step (eq. 8, top-k).

  python -m scripts.benchmark_spreadout --num_classes=100000 --dim=128 \
      --updated_classes=1000 --spreadout_k=10
Prints one JSON object (seconds_per_step, peak_rss_mb, the GFLOP of the exact
nearest-class search, the dense score matrix the chunking avoids).
--updated_classes=0 means every class (C' = C).
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.reports import page_flag
from fed_retrieval.reports import result_files
from fed_retrieval.reports import spreadout_benchmark
from losses import class_spreadout

_NUM_CLASSES = flags.DEFINE_integer("num_classes", 100_000, "Rows of the class table.")
_DIM = flags.DEFINE_integer("dim", 128, "Class embedding dimension.")
_UPDATED = flags.DEFINE_integer("updated_classes", 1000,
                                "Classes of one round's clients (C'); 0: all.")
_K = flags.DEFINE_integer("spreadout_k", 10, "Nearest classes per updated class.")
_MODE = flags.DEFINE_enum("spreadout", "topk", list(class_spreadout.SPREADOUT_MODES),
                          "topk (eq. 8) or all (eq. 7).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed steps (the fastest counts).")


def main(argv) -> None:
  del argv
  updated = _UPDATED.value or _NUM_CLASSES.value
  report = spreadout_benchmark.spreadout_step_benchmark(
      _NUM_CLASSES.value, _DIM.value, updated, _K.value, _MODE.value, _REPEATS.value)
  print(json.dumps(report, indent=2))
  result_files.write_report_page(page_flag.PAGE.value, "FedAwS's server spreadout step",
                                 report)


if __name__ == "__main__":
  cli.run(main, help_groups=[page_flag.HELP_GROUP])
