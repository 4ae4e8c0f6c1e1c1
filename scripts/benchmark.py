"""Throughput of the federated simulation vs centralized Keras on the same model.

  python -m scripts.benchmark --synthetic=ml1m --loss=batch_softmax
Prints one JSON object: federated_examples_per_sec, centralized_examples_per_sec,
ratio (federated / centralized), seconds_per_round, peak_rss_mb and details.
"""

import json

from fed_retrieval import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval import model_flags
from fed_retrieval import throughput
from fed_retrieval.federated_process import FederatedConfig
from tasks import movielens_task
from tasks import task_flags

_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed federated rounds (after one warm-up).")
_CLIENTS_PER_ROUND = flags.DEFINE_integer("clients_per_round", 100, "Clients per round.")
_STEPS_PER_EXECUTION = flags.DEFINE_list(
    "steps_per_execution", ["1", "100"],
    "Keras steps_per_execution values tried for centralized; the best counts.")


def main(argv) -> None:
  del argv
  task = movielens_task.build_task(task_flags.task_config_from_flags())
  config = FederatedConfig(loss=model_flags.LOSS.value,
                           clients_per_round=_CLIENTS_PER_ROUND.value,
                           batch_size=model_flags.BATCH_SIZE.value,
                           seed=model_flags.SEED.value)
  federated = throughput.federated_throughput(task, config, _ROUNDS.value)
  centralized = {
      int(s): throughput.centralized_throughput(
          task, config.loss, config.batch_size,
          int(federated["examples_per_round"] * _ROUNDS.value), int(s))
      ["centralized_examples_per_sec"]
      for s in _STEPS_PER_EXECUTION.value}
  best = max(centralized.values())
  print(json.dumps({
      "loss": config.loss,
      "federated_examples_per_sec": round(federated["federated_examples_per_sec"], 1),
      "centralized_examples_per_sec": round(best, 1),
      "ratio": round(federated["federated_examples_per_sec"] / best, 3),
      "seconds_per_round": round(federated["seconds_per_round"], 3),
      "examples_per_round": round(federated["examples_per_round"], 1),
      "centralized_by_steps_per_execution": {k: round(v, 1)
                                             for k, v in centralized.items()},
      "peak_rss_mb": round(throughput.own_peak_rss_mb() +
                           federated["worker_peak_rss_mb"], 1),
      "worker_peak_rss_mb": round(federated["worker_peak_rss_mb"], 1),
  }, indent=2))


if __name__ == "__main__":
  cli.run(main)
