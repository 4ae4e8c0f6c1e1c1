r"""Prepares a MovieLens (or synthetic) ratings log: TFRecord examples + stats.json.

  python -m scripts.prepare_movielens --synthetic=ml1m --output_dir=/tmp/ml1m
  python -m scripts.prepare_movielens --ratings_path=ml-1m/ratings.dat \
      --output_dir=/tmp/ml1m_real
"""

import json
import sys

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.training import run_flags
from tasks.movielens import flags as movielens_flags
from tasks.movielens import movielens_task
from tasks.movielens import prepared_dataset

flags.mark_flag_as_required("output_dir")


def main(argv) -> None:
  del argv
  task = movielens_task.build_task(movielens_flags.task_config_from_flags())
  for problem in task.empty_split_problems():
    print(f"warning: {problem}", file=sys.stderr)
  stats = prepared_dataset.write_prepared_dataset(task, run_flags.OUTPUT_DIR.value)
  print(json.dumps(stats, indent=2))


if __name__ == "__main__":
  cli.run(main, help_groups=[movielens_flags.HELP_GROUPS[0],
                             ("Output", None, (run_flags.OUTPUT_DIR,))])
