r"""Federated training with TFF, resumable: one run of any task family.

  python -m scripts.train_federated --synthetic=small --loss=hinge_spreadout \
      --rounds=50 --clients_per_round=20 --output_dir=runs/fed_small
Re-running the same command after a kill (even SIGKILL) resumes from the last
checkpoint; --shuffle_across_users trains the IID "federated shuffled" control.

  python -m scripts.train_federated --task=xc --synthetic_xc=xc_small \
      --algorithm=fedaws --spreadout=topk --spreadout_k=10 --output_dir=runs/fedaws

  python -m scripts.train_federated --task=xc --synthetic_xc=xc_10k \
      --partition=k_labels_per_client --labels_per_client=10 --algorithm=fedss \
      --num_negatives=500 --output_dir=runs/fedss

  python -m scripts.train_federated --synthetic=ml1m --algorithm=fedss \
      --num_negatives=200 --output_dir=runs/ml_fedss
trains sampled global softmax (items as classes; --loss must be global_softmax).

  python -m scripts.train_federated --task=pu --pu_data=digits \
      --positive_classes_per_client=2 --pu_num_clients=5 --pu_method=fedpu \
      --output_dir=runs/fedpu
trains the image classifier from positive and unlabeled clients (FedPU or a
baseline: positive_only, pu_single_negative, supervised).
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.training import federated_flags
from fed_retrieval.training import federated_loop
from fed_retrieval.training import run_flags
from tasks import registry

flags.mark_flag_as_required("output_dir")


def main(argv) -> None:
  del argv
  family = registry.from_flags()
  run = family.federated_run(family.settings_from_flags())
  results = federated_loop.run_federated(run.job(), run.loop, run_flags.OUTPUT_DIR.value)
  print(json.dumps(results, indent=2))


if __name__ == "__main__":
  cli.run(main, help_groups=[*registry.help_groups(),
                               *federated_flags.ONE_RUN_FLAGS])
