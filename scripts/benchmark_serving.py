r"""Serving cost of the top-k indexes: brute force against approximate (faiss IVF).

  python -m scripts.benchmark_serving --rows=100000,670000,2000000 --dim=64 \
      --page=docs/results/serving/results.md
For each catalog size: build seconds, index memory against the table's,
queries/s at each --batches size, recall@k against brute force on held-out
queries, on a synthetic clustered catalog (fed_retrieval/reports/serving_benchmark.py).
Prints one JSON object.
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval import index_flags
from fed_retrieval.reports import page_flag
from fed_retrieval.reports import result_files
from fed_retrieval.reports import serving_benchmark
from fed_retrieval.runtime import process_memory

_ROWS = flags.DEFINE_list("rows", ["100000", "670000", "2000000"], "Catalog sizes.")
_DIM = flags.DEFINE_integer("dim", 64, "Embedding width (the XC encoder's default).")
_K = flags.DEFINE_integer("k", 10, "Items each query retrieves.")
_BATCHES = flags.DEFINE_list("batches", ["1", "256"], "Query batch sizes timed.")


def _positive_ints(flag: flags.FlagHolder) -> list:
  try:
    values = [int(v) for v in flag.value]
  except ValueError:
    values = []
  if not values or min(values) < 1:
    raise cli.UserError(f"--{flag.name}={','.join(flag.value)}: give positive integers")
  return values


def main(argv) -> None:
  del argv
  rows, batches = _positive_ints(_ROWS), _positive_ints(_BATCHES)
  if _K.value < 1 or _K.value > min(rows):
    raise cli.UserError(f"--k={_K.value} must lie in [1, {min(rows)}] (the smallest "
                        "catalog)")
  results = []
  with process_memory.ProcessTreePeak() as peak:
    for size in rows:
      results += serving_benchmark.catalog_benchmark(
          size, _DIM.value, _K.value, batches, index_flags.INDEX_RECALL.value)
      print(serving_benchmark.results_table(results[-2:], _K.value, batches), flush=True)
  report = {"catalogs": results, **peak.report()}
  print(json.dumps(report, indent=2))
  result_files.write_report_page(
      page_flag.PAGE.value, "Serving: brute force against the approximate index",
      report, serving_benchmark.results_table(results, _K.value, batches) +
      f"\nPeak RSS of the process tree: {peak.peak_rss_mb:,.0f} MB.\n")


if __name__ == "__main__":
  cli.run(main, help_groups=[("Index", None, (index_flags.INDEX_RECALL,)),
                             page_flag.HELP_GROUP])
