r"""Prepares a MovieLens (or synthetic) ratings log: TFRecord examples + stats.json.

  python -m scripts.prepare_movielens --synthetic=ml1m --output_dir=/tmp/ml1m
  python -m scripts.prepare_movielens --ratings_path=ml-1m/ratings.dat \
      --output_dir=/tmp/ml1m_real
"""

import json
import sys

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from tasks import task_flags
from tasks.movielens import movielens_task
from tasks.movielens import prepared_dataset

_OUTPUT_DIR = flags.DEFINE_string("output_dir", None, "Where to write the data.")
flags.mark_flag_as_required("output_dir")


def main(argv) -> None:
  del argv
  task = movielens_task.build_task(task_flags.task_config_from_flags())
  for problem in task.empty_split_problems():
    print(f"warning: {problem}", file=sys.stderr)
  stats = prepared_dataset.write_prepared_dataset(task, _OUTPUT_DIR.value)
  print(json.dumps(stats, indent=2))


if __name__ == "__main__":
  cli.run(main, help_groups=[task_flags.MOVIELENS_FLAGS])
