r"""Federated training with TFF, resumable: the MovieLens dual encoder (FedAvg,
FedSGD, or FedSS's sampled global softmax) or, with --task=xc, the XC classifier
(FedAwS, FedSS or a baseline).

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

from fed_retrieval.algorithms import fedss
from fed_retrieval.models import model_flags
from fed_retrieval.training import federated_flags
from fed_retrieval.training import federated_loop
from fed_retrieval.training import pu_training
from fed_retrieval.training import sampled_softmax_training
from fed_retrieval.training.sampled_softmax_training import LOSS
from fed_retrieval.training import xc_training
from losses import pu_risk
from tasks import task_flags
from tasks.movielens import movielens_task
from tasks.pu import pu_task
from tasks.xc import xc_task

_PU_METHOD = flags.DEFINE_enum("pu_method", "fedpu", list(pu_risk.METHODS),
                               "--task=pu: the method to train.")
flags.mark_flag_as_required("output_dir")


def main(argv) -> None:
  del argv
  if task_flags.TASK.value == "xc":
    results = xc_training.train_xc_federated(
        xc_task.build_xc_task(task_flags.xc_task_config_from_flags()),
        federated_flags.xc_federated_config_from_flags(), model_flags.OUTPUT_DIR.value)
    print(json.dumps(results, indent=2))
    return
  if task_flags.TASK.value == "pu":
    results = pu_training.train_pu_federated(
        pu_task.build_pu_task(task_flags.pu_task_config_from_flags()),
        federated_flags.pu_federated_config_from_flags(_PU_METHOD.value),
        model_flags.OUTPUT_DIR.value)
    print(json.dumps(results, indent=2))
    return
  task = movielens_task.build_task(task_flags.task_config_from_flags())
  algorithm = federated_flags.ALGORITHM.value
  if algorithm in fedss.ALGORITHMS:
    if flags.FLAGS["loss"].present and model_flags.LOSS.value != LOSS:
      raise ValueError(f"--algorithm={algorithm} trains {LOSS} (sampled over a "
                       f"client's items), not --loss={model_flags.LOSS.value}")
    federated_flags.refuse_fedavg_only_flags("FedSS and its baselines")
    results = sampled_softmax_training.train_sampled_softmax(
        task, federated_flags.federated_config_from_flags(LOSS),
        federated_flags.fedss_config_from_flags(algorithm),
        model_flags.OUTPUT_DIR.value, model_flags.EMBEDDING_DIM.value)
  else:
    results = federated_loop.train_federated(
        task, federated_flags.federated_config_from_flags(model_flags.LOSS.value),
        model_flags.OUTPUT_DIR.value, embedding_dim=model_flags.EMBEDDING_DIM.value)
  print(json.dumps(results, indent=2))


if __name__ == "__main__":
  cli.run(main, help_groups=[*task_flags.ALL_FLAGS, model_flags.MODEL_FLAGS,
                               model_flags.RUN_FLAGS, *federated_flags.ALL_FLAGS])
