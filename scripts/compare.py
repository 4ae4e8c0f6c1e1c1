"""The main job: centralized vs federated training of each loss, as in the paper.

  python -m scripts.compare --synthetic=ml1m --output_dir=runs/compare \
      [--losses=batch_softmax,hinge_spreadout] [--include_shuffled]
Writes results.csv, results.md and recall_vs_rounds.png in --output_dir (one
sub-directory per run; re-running resumes) and prints the table. Each
centralized run trains on as many examples as the federated run of its loss.
"""

from fed_retrieval import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval import comparison
from fed_retrieval import federated_flags
from fed_retrieval import model_flags
from losses import registry
from tasks import task_flags

_LOSSES = flags.DEFINE_list(
    "losses", ["batch_softmax", "batch_softmax_spreadout", "hinge_spreadout",
               "global_softmax"], "Losses to compare.")
_INCLUDE_SHUFFLED = flags.DEFINE_bool(
    "include_shuffled", False, "Also train the IID 'federated shuffled' control.")
_CENTRALIZED_OPTIMIZER = flags.DEFINE_string("centralized_optimizer", "adam",
                                             "Optimizer of the centralized runs.")
_CENTRALIZED_LEARNING_RATE = flags.DEFINE_float("centralized_learning_rate", 0.01,
                                                "Learning rate of the centralized runs.")
flags.mark_flag_as_required("output_dir")


def main(argv) -> None:
  del argv
  for loss in _LOSSES.value:
    registry.base_loss_name(loss)  # Fails early, naming --loss, on a typo.
  rows = comparison.run_comparison(
      task_flags.task_config_from_flags(), _LOSSES.value,
      federated_flags.federated_config_from_flags(_LOSSES.value[0]),
      _CENTRALIZED_OPTIMIZER.value, _CENTRALIZED_LEARNING_RATE.value,
      model_flags.OUTPUT_DIR.value, _INCLUDE_SHUFFLED.value,
      model_flags.EMBEDDING_DIM.value)
  print(comparison.write_reports(rows, model_flags.OUTPUT_DIR.value))


if __name__ == "__main__":
  cli.run(main)
