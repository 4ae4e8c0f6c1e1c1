r"""An outside reference: TensorFlow Recommenders' sequential-retrieval recipe
on the same split and recall@k as the comparison.

  python -m scripts.tfrs_reference --ratings_path=ml-100k
Prints its test recall@k (with the standard error over users) as JSON;
compare it with the centralized rows of `scripts.compare` on the same flags.
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.

from fed_retrieval.reports import page_flag
from fed_retrieval.reports import result_files
from fed_retrieval.reports import tfrs_reference
from tasks.movielens import flags as movielens_flags
from tasks.movielens import movielens_task


def main(argv) -> None:
  del argv
  task = movielens_task.build_task(movielens_flags.task_config_from_flags())
  report = tfrs_reference.train_and_test(task, movielens_flags.ks_from_flag())
  print(json.dumps(report, indent=2))
  result_files.write_report_page(page_flag.PAGE.value, "TFRS's sequential recipe", report)


if __name__ == "__main__":
  cli.run(main, help_groups=[movielens_flags.DATA_FLAGS, page_flag.HELP_GROUP])
