r"""The main jobs: centralized vs federated retrieval (MovieLens), FedAwS (XC).

  python -m scripts.compare --synthetic=ml1m --output_dir=runs/compare \
      [--losses=batch_softmax,hinge_spreadout] [--include_shuffled] [--include_fedsgd] \
      [--budget=matched --rounds=45]
writes results.csv, results.md and recall_curves.png (a run a sub-directory;
re-running resumes). Each run trains until validation recall@10 stops improving
(--patience evaluations, capped by --rounds and --centralized_max_epochs), or
with --budget=matched: federated --rounds, centralized on as many examples.

  python -m scripts.compare --synthetic=ml1m --losses= \
      --algorithms=fedss,full_softmax --num_negatives=200 --output_dir=runs/ml_fedss
adds FedSS runs (sampled global softmax; --losses= skips the loss runs) with the
bytes each client moves per round, and quality_vs_bytes.png.

  python -m scripts.compare --task=xc --synthetic_xc=xc_small --output_dir=runs/xc \
      [--xc_train_path=TRAIN.txt --xc_test_path=TEST.txt] [--partition=...] \
      [--algorithms=fedaws,softmax_oracle] [--algorithms=fedss,neg_only,pos_only,\
      full_softmax --num_negatives=500]
trains FedAwS, FedSS and their baselines on the same clients, and the same
model centrally on one label a point and on all labels (the references;
--nocentralized_references skips them), and writes results.csv (algorithm,
precision@1/3/5, P@1 gaps to the references, bytes per client), results.md,
precision_curves.png and quality_vs_bytes.png.

  python -m scripts.compare --task=pu --pu_data=digits --output_dir=runs/pu \
      [--pu_data=mnist --mnist_path=DIR] [--pu_settings=iid_10x1,noniid2_10x1] \
      [--positive_classes=2,3,5] [--methods=fedpu,positive_only]
runs FedPU and its baselines on the paper's settings (Tables 1-3) and writes
results.csv (setting, method, accuracy, ...), results.md and accuracy_curves.png.
"""

import sys

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms import fedss
from fed_retrieval.models import model_flags
from fed_retrieval.reports import comparison
from fed_retrieval.reports import pu_comparison
from fed_retrieval.reports import xc_comparison
from fed_retrieval.training import federated_flags
from fed_retrieval.training import run_directory
from fed_retrieval.training.centralized_loop import CentralizedConfig
from fed_retrieval.training.xc_training import XCCentralizedConfig
from losses import pu_risk
from losses import registry
from tasks import task_flags

_LOSSES = flags.DEFINE_list(
    "losses", ["batch_softmax", "batch_softmax_spreadout", "hinge_spreadout",
               "global_softmax"], "Losses to compare.")
_BUDGET = flags.DEFINE_enum(
    "budget", "converged", list(comparison.BUDGETS),
    "converged: every run until validation recall stops improving; matched: "
    "federated --rounds, centralized on as many examples.")
_INCLUDE_SHUFFLED = flags.DEFINE_bool(
    "include_shuffled", False, "Also train the IID 'federated shuffled' control.")
_INCLUDE_FEDSGD = flags.DEFINE_bool(
    "include_fedsgd", False, "Also train the FedSGD control (one step per round).")
_XC_CENTRALIZED = XCCentralizedConfig()
_CENTRALIZED_OPTIMIZER = flags.DEFINE_string("centralized_optimizer", "adam",
                                             "Optimizer of the centralized runs.")
_CENTRALIZED_JIT_COMPILE = flags.DEFINE_bool(
    "centralized_jit_compile", None,
    "MovieLens: compile the centralized runs' training step with XLA (default: "
    "for the losses with spreadout, and global softmax under SGD; see "
    "train_centralized's --jit_compile).")
_CENTRALIZED_LEARNING_RATE = flags.DEFINE_float(
    "centralized_learning_rate", 0.01, "Learning rate of the centralized runs "
    f"(--task=xc: {_XC_CENTRALIZED.learning_rate}).")
_CENTRALIZED_MAX_EPOCHS = flags.DEFINE_integer(
    "centralized_max_epochs", None, "Cap of the converged centralized runs, in "
    "passes (default: as many examples as --rounds federated rounds train on; "
    f"--task=xc: {_XC_CENTRALIZED.epochs}).")
_CENTRALIZED_EVAL_EVERY_STEPS = flags.DEFINE_integer(
    "centralized_eval_every_steps", None,
    "Validation evaluation of the centralized runs every N batches (default: "
    "every as many examples as --eval_every federated rounds train on; "
    "--task=xc: once a pass).")
_CENTRALIZED_REFERENCES = flags.DEFINE_bool(
    "centralized_references", True,
    "--task=xc: also train the centralized references (full softmax on one label a "
    "point and on all labels).")
_REFERENCES_DIR = flags.DEFINE_string(
    "references_dir", None,
    "--task=xc: where the centralized references are trained, once for every "
    "comparison on the same data and settings (default: references/ beside "
    "--output_dir); the comparison links them.")
_ALGORITHMS = flags.DEFINE_list(
    "algorithms", None,
    "--task=xc: the algorithms to compare (default: FedAwS's "
    f"{','.join(fedaws.ALGORITHMS)}; also {','.join(fedss.ALGORITHMS)}). MovieLens: "
    "FedSS runs of sampled global softmax added to the losses' runs (default none).")
_NOISE_MULTIPLIERS = flags.DEFINE_list(
    "noise_multipliers", [],
    "MovieLens: a client-level DP run of each loss per noise multiplier, beside "
    "the others (--clip_norm, --dp_clipping, --target_delta apply), with epsilon.")
_METHODS = flags.DEFINE_list("methods", list(pu_risk.METHODS),
                             "--task=pu: the methods to compare.")
flags.mark_flag_as_required("output_dir")


def compare_pu() -> None:
  rows = pu_comparison.run_pu_comparison(
      task_flags.pu_task_config_from_flags(), task_flags.pu_settings_from_flags(),
      _METHODS.value, federated_flags.pu_federated_config_from_flags(),
      model_flags.OUTPUT_DIR.value)
  _report(pu_comparison.write_reports(rows, model_flags.OUTPUT_DIR.value))


def compare_xc() -> None:
  federated = federated_flags.xc_federated_config_from_flags()
  centralized = XCCentralizedConfig(
      optimizer=_CENTRALIZED_OPTIMIZER.value,
      learning_rate=federated_flags.given(_CENTRALIZED_LEARNING_RATE,
                                          _XC_CENTRALIZED.learning_rate),
      epochs=federated_flags.given(_CENTRALIZED_MAX_EPOCHS, _XC_CENTRALIZED.epochs),
      eval_every_steps=federated_flags.given(_CENTRALIZED_EVAL_EVERY_STEPS, None),
      patience=federated.patience, min_improvement_se=federated.min_improvement_se,
      smoothing=federated.smoothing, seed=federated.seed)
  rows = xc_comparison.run_xc_comparison(
      task_flags.xc_task_config_from_flags(), _ALGORITHMS.value or fedaws.ALGORITHMS,
      federated, model_flags.OUTPUT_DIR.value,
      centralized if _CENTRALIZED_REFERENCES.value else None, _REFERENCES_DIR.value)
  _report(xc_comparison.write_reports(rows, model_flags.OUTPUT_DIR.value))


def _report(table: str) -> None:
  """Prints the table, then says where the comparison's files are."""
  print(table)
  print(f"comparison: {run_directory.contents_line(model_flags.OUTPUT_DIR.value)}",
        file=sys.stderr)


def main(argv) -> None:
  del argv
  if _NOISE_MULTIPLIERS.value and task_flags.TASK.value != "movielens":
    raise ValueError(f"--noise_multipliers adds DP rows to the MovieLens comparison; "
                     f"--task={task_flags.TASK.value} takes --noise_multiplier (every "
                     "run private)")
  if task_flags.TASK.value == "xc":
    compare_xc()
    return
  if task_flags.TASK.value == "pu":
    compare_pu()
    return
  for loss in _LOSSES.value:
    registry.base_loss_name(loss)  # Fails early, naming --loss, on a typo.
  sampled_softmax_algorithms = _ALGORITHMS.value or []
  for algorithm in sampled_softmax_algorithms:
    if algorithm not in fedss.ALGORITHMS:
      raise ValueError(f"--algorithms: MovieLens takes the FedSS algorithms "
                       f"{', '.join(fedss.ALGORITHMS)}, got '{algorithm}'")
  federated = federated_flags.federated_config_from_flags(
      (_LOSSES.value or ["global_softmax"])[0])
  centralized = CentralizedConfig(
      epochs=_CENTRALIZED_MAX_EPOCHS.value,
      eval_every_steps=_CENTRALIZED_EVAL_EVERY_STEPS.value,
      patience=federated.patience, min_improvement_se=federated.min_improvement_se,
      optimizer=_CENTRALIZED_OPTIMIZER.value,
      learning_rate=_CENTRALIZED_LEARNING_RATE.value, split="user",
      jit_compile=_CENTRALIZED_JIT_COMPILE.value)
  rows = comparison.run_comparison(
      task_flags.task_config_from_flags(), _LOSSES.value, federated, centralized,
      model_flags.OUTPUT_DIR.value, _BUDGET.value, _INCLUDE_SHUFFLED.value,
      _INCLUDE_FEDSGD.value, model_flags.EMBEDDING_DIM.value,
      sampled_softmax_algorithms, federated_flags.fedss_config_from_flags(),
      federated_flags.dp_configs_from_flags(_NOISE_MULTIPLIERS.value))
  _report(comparison.write_reports(rows, model_flags.OUTPUT_DIR.value))


# This script's flags of one task family, listed with its --help only.
XC_COMPARISON_FLAGS = ("XC comparison", "xc", (_CENTRALIZED_REFERENCES, _REFERENCES_DIR))
PU_COMPARISON_FLAGS = ("PU comparison", "pu", (_METHODS,))

if __name__ == "__main__":
  cli.run(main, help_groups=[*task_flags.ALL_FLAGS, model_flags.MODEL_FLAGS,
                               model_flags.RUN_FLAGS, *federated_flags.ALL_FLAGS,
                               XC_COMPARISON_FLAGS, PU_COMPARISON_FLAGS])
