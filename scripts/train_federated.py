"""Federated training of the dual encoder with TFF (FedAvg or FedSGD), resumable.

  python -m scripts.train_federated --synthetic=small --loss=hinge_spreadout \
      --rounds=50 --clients_per_round=20 --output_dir=runs/fed_small
Re-running the same command after a kill (even SIGKILL) resumes from the last
checkpoint; --shuffle_across_users trains the IID "federated shuffled" control.
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.training import federated_flags
from fed_retrieval.training import federated_loop
from fed_retrieval.models import model_flags
from tasks.movielens import movielens_task
from tasks import task_flags

flags.mark_flag_as_required("output_dir")


def main(argv) -> None:
  del argv
  task = movielens_task.build_task(task_flags.task_config_from_flags())
  config = federated_flags.federated_config_from_flags(model_flags.LOSS.value)
  results = federated_loop.train_federated(
      task, config, model_flags.OUTPUT_DIR.value,
      embedding_dim=model_flags.EMBEDDING_DIM.value)
  print(json.dumps(results, indent=2))


if __name__ == "__main__":
  cli.run(main)
