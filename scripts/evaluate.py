r"""Recall@k over the full vocabulary from an exported model alone.

  python -m scripts.evaluate --model_dir=runs/central_small/export \
      --synthetic=small --split=centralized_test --k=1,5,10
Prints (and with --output writes) the same keys as a run's results.json. With
an approximate index (`--index=approximate`, or `auto` on an export that holds
one) it adds the recall@k the index reaches through it and the index's own
recall@k against the exact top-k on the split's contexts.
"""

import dataclasses
import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval import export
from fed_retrieval import index_flags
from fed_retrieval.evaluation import retrieval_evaluation
from fed_retrieval.evaluation import units
from fed_retrieval.training import run_directory
from fed_retrieval.training import run_flags
from fed_retrieval.training.loop_config import LOOP_DEFAULTS
from tasks.movielens import flags as movielens_flags
from tasks.movielens import movielens_task

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "An export directory.")
_SPLIT = flags.DEFINE_string(
    "split", "test", "train, val, test (by user) or centralized_train, "
    "centralized_test (by example).")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the results here (JSON).")
flags.mark_flag_as_required("model_dir")


def main(argv) -> None:
  del argv
  task = movielens_task.build_task(movielens_flags.task_config_from_flags())
  exported = export.load_export(_MODEL_DIR.value, task.items)
  ks = movielens_flags.ks_from_flag()
  if max(ks) > task.items.num_items:
    raise ValueError(f"--k={max(ks)} exceeds the {task.items.num_items} items")
  if exported.config.max_context_length != task.config.max_context_length:
    raise ValueError(
        f"--max_context_length={task.config.max_context_length}, but "
        f"--model_dir was exported for {exported.config.max_context_length}")
  examples = task.split(_SPLIT.value)
  results = {"model_dir": _MODEL_DIR.value, "split": _SPLIT.value,
             _SPLIT.value: units.with_standard_error(retrieval_evaluation.evaluate(
                 exported.scores, examples, ks,
                 run_flags.BATCH_SIZE.value or LOOP_DEFAULTS["movielens"].batch_size),
                 f"global_recall@{max(ks)}")}
  index = exported.item_index(index_flags.INDEX.value)
  if index.info.kind != "brute_force":
    results["index"] = dataclasses.asdict(index.info)
    results[_SPLIT.value].update(retrieval_evaluation.index_recall(
        exported.query_tower, index, exported.item_index("brute_force"), examples, ks))
  if _OUTPUT.value:
    run_directory.write_json(_OUTPUT.value, results)
  print(json.dumps(results, indent=2))


if __name__ == "__main__":
  cli.run(main, help_groups=[movielens_flags.HELP_GROUPS[0], ("Evaluation", None, (
      run_flags.BATCH_SIZE, movielens_flags.KS)), index_flags.HELP_GROUP])
