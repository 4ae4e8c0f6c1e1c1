r"""Centralized training of the dual encoder (the reference for federated runs).

  python -m scripts.train_centralized --synthetic=small --loss=hinge_spreadout \
      --epochs=3 --output_dir=runs/central_small
Writes metrics.csv, tensorboard/, checkpoint/, export/ and results.json in
--output_dir; re-running the same command after a kill resumes.
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.models import model_flags
from fed_retrieval.training import centralized_loop
from tasks import task_flags
from tasks.movielens import movielens_task

_EPOCHS = flags.DEFINE_integer("epochs", 1, "Passes over the training data.")
_STEPS = flags.DEFINE_integer("steps", None, "Train this many batches instead.")
_EVAL_EVERY_STEPS = flags.DEFINE_integer(
    "eval_every_steps", None,
    "Evaluate on the validation users every N batches (default: once a pass).")
_PATIENCE = flags.DEFINE_integer(
    "patience", 0, "Stop once N evaluations followed the best validation recall, "
    "never at a new best (needs --split_by=user; 0: train all --epochs); the best "
    "model is reported.")
_MIN_IMPROVEMENT_SE = flags.DEFINE_float(
    "min_improvement_se", 1.0,
    "An evaluation becomes the best when it beats the best by more than this many "
    "standard errors of the difference, paired over the validation users.")
_MIN_PASSES = flags.DEFINE_float(
    "min_passes", 0.0, "The stopping rule ends no run before this many passes.")
_OPTIMIZER = flags.DEFINE_string("optimizer", "adam", "sgd, sgdm, adam or adagrad.")
_JIT_COMPILE = flags.DEFINE_bool(
    "jit_compile", None,
    "Compile each batch's training step with XLA (default: for the losses with "
    "spreadout, BS + spreadout and H+S: 1.3-1.6x faster on ml-latest-small; for "
    "global softmax under --optimizer=sgd, 1.3-1.4x; not batch softmax, the "
    "hinge or global softmax under Adam, where it gains nothing or slows).")
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 0.01, "Learning rate.")
_SPLIT_BY = flags.DEFINE_enum(
    "split_by", "example", ["example", "user"],
    "'example': the centralized 90/10 split; 'user': train on the federated "
    "training users and test on the test users (as federated runs do).")
flags.mark_flag_as_required("output_dir")


def main(argv) -> None:
  del argv
  task = movielens_task.build_task(task_flags.task_config_from_flags())
  config = centralized_loop.CentralizedConfig(
      objective=model_flags.objective_config_from_flags(model_flags.LOSS.value),
      batch_size=model_flags.BATCH_SIZE.value, epochs=_EPOCHS.value,
      steps=_STEPS.value, eval_every_steps=_EVAL_EVERY_STEPS.value,
      min_passes=_MIN_PASSES.value, patience=_PATIENCE.value,
      min_improvement_se=_MIN_IMPROVEMENT_SE.value, optimizer=_OPTIMIZER.value,
      learning_rate=_LEARNING_RATE.value, seed=model_flags.SEED.value,
      split=_SPLIT_BY.value, ks=model_flags.ks_from_flag(),
      jit_compile=_JIT_COMPILE.value)
  results = centralized_loop.train_centralized(
      task, config, model_flags.OUTPUT_DIR.value,
      embedding_dim=model_flags.EMBEDDING_DIM.value)
  print(json.dumps(results, indent=2))


if __name__ == "__main__":
  cli.run(main, help_groups=[task_flags.MOVIELENS_FLAGS, model_flags.MODEL_FLAGS,
                               model_flags.RUN_FLAGS])
