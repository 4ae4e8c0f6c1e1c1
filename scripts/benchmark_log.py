r"""Reading an interaction log of one's own: seconds and peak memory.

  python -m scripts.benchmark_log --rows=25000000 --log_path=/tmp/log25m.csv
Writes a synthetic CSV log of --rows events (text user and item ids, Unix
times, ratings) to --log_path unless it exists, then times reading it
(`interaction_log`) and building its task (examples and splits), each with
the peak resident memory of the process, and prints one JSON object.
"""

import json
import os

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.reports import log_benchmark
from fed_retrieval.reports import page_flag
from fed_retrieval.reports import result_files

_ROWS = flags.DEFINE_integer("rows", 25_000_000, "Events in the log.")
_USERS = flags.DEFINE_integer("users", 250_000, "Distinct users.")
_ITEMS = flags.DEFINE_integer("items", 100_000, "Distinct items (at most).")
_LOG_PATH = flags.DEFINE_string("log_path", "/tmp/fed_retrieval_log.csv",
                                "Where the log is written (or read, if it exists).")


def main(argv) -> None:
  del argv
  if not os.path.isfile(_LOG_PATH.value):
    log_benchmark.write_log(_LOG_PATH.value, _ROWS.value, _USERS.value, _ITEMS.value)
  report = log_benchmark.measure(_LOG_PATH.value)
  print(json.dumps(report, indent=2))
  result_files.write_report_page(page_flag.PAGE.value, "Reading an interaction log", report)


if __name__ == "__main__":
  cli.run(main, help_groups=[page_flag.HELP_GROUP])
