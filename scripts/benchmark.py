r"""Throughput of the federated simulation and centralized Keras vs a tight loop.

  python -m scripts.benchmark --synthetic=ml1m --loss=batch_softmax
Prints one JSON object: federated_examples_per_sec, centralized_examples_per_sec,
ratio (federated / centralized), tight_loop_examples_per_sec (plain SGD steps
in a tf.function over batches in memory: the reference),
federated_fraction_of_tight_loop, centralized_fraction_of_tight_loop,
seconds_per_round, federated_memory (peak RSS of the process tree, the TFF
worker included, during the federated rounds) and details.
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.models import model_flags
from fed_retrieval.reports import throughput
from fed_retrieval.training.federated_loop import FederatedConfig
from losses import registry
from tasks import task_flags
from tasks.movielens import movielens_task

_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed federated rounds (after one warm-up).")
_CLIENTS_PER_ROUND = flags.DEFINE_integer("clients_per_round", 100, "Clients per round.")
_STEPS_PER_EXECUTION = flags.DEFINE_list(
    "steps_per_execution", ["1", "100"],
    "Keras steps_per_execution values tried for centralized; the best counts.")


def main(argv) -> None:
  del argv
  task = movielens_task.build_task(task_flags.task_config_from_flags())
  loss = model_flags.LOSS.value
  config = FederatedConfig(objective=registry.ObjectiveConfig(loss),
                           clients_per_round=_CLIENTS_PER_ROUND.value,
                           batch_size=model_flags.BATCH_SIZE.value,
                           seed=model_flags.SEED.value)
  federated = throughput.federated_throughput(task, config, _ROUNDS.value)
  num_examples = int(federated["examples_per_round"] * _ROUNDS.value)
  centralized = {
      int(s): throughput.centralized_throughput(
          task, loss, config.batch_size, num_examples, int(s))
      ["centralized_examples_per_sec"]
      for s in _STEPS_PER_EXECUTION.value}
  tight = {f"xla={jit}": throughput.tight_loop_throughput(
      task, loss, config.batch_size, num_examples, jit) for jit in (False, True)}
  best_centralized = max(centralized.values())
  best_tight = max(tight.values())
  federated_rate = federated["federated_examples_per_sec"]
  print(json.dumps({
      "loss": loss,
      "federated_examples_per_sec": round(federated_rate, 1),
      "centralized_examples_per_sec": round(best_centralized, 1),
      "ratio": round(federated_rate / best_centralized, 3),
      "tight_loop_examples_per_sec": round(best_tight, 1),
      "federated_fraction_of_tight_loop": round(federated_rate / best_tight, 3),
      "centralized_fraction_of_tight_loop": round(best_centralized / best_tight, 3),
      "seconds_per_round": round(federated["seconds_per_round"], 3),
      "examples_per_round": round(federated["examples_per_round"], 1),
      "centralized_by_steps_per_execution": {k: round(v, 1)
                                             for k, v in centralized.items()},
      "tight_loop_by_xla": {k: round(v, 1) for k, v in tight.items()},
      # The federated rounds' process tree: Python and the TFF worker.
      "federated_memory": federated["memory"],
  }, indent=2))


if __name__ == "__main__":
  cli.run(main, help_groups=[task_flags.MOVIELENS_FLAGS, ("Model", None, (
      model_flags.LOSS, model_flags.BATCH_SIZE, model_flags.SEED))])
