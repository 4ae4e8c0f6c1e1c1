"""--help of every script: its usage and the project flags it reads, a line
each with its default, under ~100 lines, without TensorFlow's flags."""

import re

import pytest

from tests.script_runs import run_module, run_code

# Flags each script's --help must list (for the --task given), beyond its own.
_EXPECTED = {
    ("train_federated", "movielens"): {"ratings_path", "loss", "max_local_steps",
                                       "rounds", "max_passes", "patience", "output_dir"},
    ("train_federated", "xc"): {"xc_train_path", "spreadout_lambda", "hinge_margin",
                                "rounds", "min_passes"},
    ("train_federated", "pu"): {"pu_data", "labeled_fraction", "pu_surrogate",
                                "pu_method"},
    ("compare", "movielens"): {"losses", "centralized_max_epochs", "synthetic",
                               "eval_every", "num_negatives"},
    ("compare", "xc"): {"algorithms", "partition", "spreadout_k"},
    ("compare", "pu"): {"methods", "pu_settings", "conv_filters"},
    ("train_centralized", None): {"centralized_max_epochs", "patience",
                                  "centralized_eval_every_steps", "loss", "split_by",
                                  "ratings_path", "output_dir", "spreadout_weight"},
    ("prepare_movielens", None): {"ratings_path", "user_split", "output_dir"},
    ("evaluate", None): {"model_dir", "split", "k", "ratings_path", "index"},
    ("export", None): {"run_dir", "export_dir", "k", "index", "index_recall"},
    ("recommend", None): {"model_dir", "history", "items_path", "item_name_column",
                          "index"},
    ("benchmark", None): {"rounds", "steps_per_execution", "loss", "synthetic"},
    ("benchmark_round_cost", None): {"num_classes", "num_negatives"},
    ("benchmark_spreadout", None): {"num_classes", "updated_classes"},
    ("benchmark_serving", None): {"rows", "dim", "batches", "index_recall", "page"},
}
# Project flags no script reads for --task=movielens but another task does.
_OTHER_TASKS = {"xc_train_path", "pu_data", "spreadout_lambda", "pu_surrogate"}


def _help(script, *args):
  result = run_module(f"scripts.{script}", "--help", *args)
  assert result.returncode == 0, result.stderr
  return result.stdout


@pytest.mark.parametrize("script,task", sorted(_EXPECTED, key=str))
def test_help_lists_the_flags_the_script_reads_with_defaults(script, task):
  text = _help(script, *([f"--task={task}"] if task else []))
  lines = text.splitlines()
  listed = set(re.findall(r"^  --(\w+)", text, flags=re.M))
  assert len(lines) <= 100
  assert _EXPECTED[(script, task)] <= listed
  assert not listed & {"test_srcdir", "xml_output_file", "logtostderr", "only_check_args"}
  if task == "movielens":
    assert not listed & _OTHER_TASKS
    assert "--task=pu|xc --help" in text
  assert "  --clip_norm=0.1 " in text or script != "train_federated"


def test_every_task_together_lists_every_project_flag_of_train_federated():
  listed = set()
  for task in ("movielens", "xc", "pu"):
    listed |= set(re.findall(r"^  --(\w+)", _help("train_federated", f"--task={task}"),
                             flags=re.M))
  everything = run_code(
      "from scripts import cli; import scripts.train_federated; "
      "from absl import flags; print(' '.join(f.name for m, fs in "
      "flags.FLAGS.flags_by_module_dict().items() if m.startswith(('fed_retrieval', "
      "'tasks', 'scripts')) for f in fs))").stdout.split()
  assert set(everything) - listed == set()
