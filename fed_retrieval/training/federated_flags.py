"""absl flags of federated training, shared by train_federated, compare and benchmark."""

from absl import flags

from fed_retrieval.models import model_flags
from fed_retrieval.algorithms.fedavg import ALGORITHMS
from fed_retrieval.algorithms.fedavg import FederatedConfig
from fed_retrieval.algorithms.optimizers import OPTIMIZER_NAMES

_DEFAULTS = FederatedConfig()
ALGORITHM = flags.DEFINE_enum("algorithm", _DEFAULTS.algorithm, list(ALGORITHMS),
                              "Federated algorithm.")
ROUNDS = flags.DEFINE_integer("rounds", _DEFAULTS.rounds, "Federated rounds.")
CLIENTS_PER_ROUND = flags.DEFINE_integer("clients_per_round",
                                         _DEFAULTS.clients_per_round,
                                         "Clients sampled per round.")
LOCAL_EPOCHS = flags.DEFINE_integer("local_epochs", _DEFAULTS.local_epochs,
                                    "Passes over its data a client makes per round.")
CLIENT_OPTIMIZER = flags.DEFINE_enum("client_optimizer", _DEFAULTS.client_optimizer,
                                     list(OPTIMIZER_NAMES), "FedAvg client optimizer.")
CLIENT_LEARNING_RATE = flags.DEFINE_float("client_learning_rate",
                                          _DEFAULTS.client_learning_rate,
                                          "FedAvg client learning rate.")
SERVER_OPTIMIZER = flags.DEFINE_enum("server_optimizer", _DEFAULTS.server_optimizer,
                                     list(OPTIMIZER_NAMES), "Server optimizer.")
SERVER_LEARNING_RATE = flags.DEFINE_float("server_learning_rate",
                                          _DEFAULTS.server_learning_rate,
                                          "Server learning rate.")
EVAL_EVERY = flags.DEFINE_integer("eval_every", _DEFAULTS.eval_every,
                                  "Evaluate on the validation users every N rounds.")
CHECKPOINT_EVERY = flags.DEFINE_integer("checkpoint_every", _DEFAULTS.checkpoint_every,
                                        "Save the server state every N rounds.")
PATIENCE = flags.DEFINE_integer(
    "patience", _DEFAULTS.patience,
    "Stop after this many validation evaluations without improvement "
    "(0: train all --rounds); the best evaluated model is reported.")
MIN_DELTA = flags.DEFINE_float(
    "min_delta", _DEFAULTS.min_delta,
    "Relative improvement of validation recall that resets the patience "
    "(0.01: 1% better than the best so far).")


def federated_config_from_flags(loss: str) -> FederatedConfig:
  return FederatedConfig(
      objective=model_flags.objective_config_from_flags(loss),
      algorithm=ALGORITHM.value, rounds=ROUNDS.value,
      clients_per_round=CLIENTS_PER_ROUND.value, local_epochs=LOCAL_EPOCHS.value,
      batch_size=model_flags.BATCH_SIZE.value,
      client_optimizer=CLIENT_OPTIMIZER.value,
      client_learning_rate=CLIENT_LEARNING_RATE.value,
      server_optimizer=SERVER_OPTIMIZER.value,
      server_learning_rate=SERVER_LEARNING_RATE.value,
      eval_every=EVAL_EVERY.value, checkpoint_every=CHECKPOINT_EVERY.value,
      patience=PATIENCE.value, min_delta=MIN_DELTA.value,
      seed=model_flags.SEED.value, ks=model_flags.ks_from_flag())
