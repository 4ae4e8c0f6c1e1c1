"""TFF learning processes (FedAvg, FedSGD) for the dual encoder.

The processes are built with `tff.learning.algorithms` from the same Keras model
and loss objects as centralized training. Both algorithms reject non-finite
client updates: TFF's client work zeroes such an update and gives it weight 0,
so it is not averaged in (see tests/test_fedavg.py).
"""

import dataclasses
from typing import Callable, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import client_shards
from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import optimizers
from fed_retrieval.evaluation import recall_metrics
from fed_retrieval.models import dual_encoder
from fed_retrieval.models import variable_model
from losses import registry

ALGORITHMS = ("fedavg", "fedsgd")
# A Python-style iterator loop over each client's batches instead of TFF's
# default `dataset.reduce`: the same updates, and 1.9x the examples per second
# here (9.6k vs 5.0k on the synthetic ml1m preset, batch softmax).
CLIENT_LOOP = tff.learning.LoopImplementation.DATASET_ITERATOR
ModelFn = Callable[[], tff.learning.models.VariableModel]


def input_spec(max_context_length: int, candidates: str = "vocabulary"):
  """The batches every client dataset yields: (context, label), or
  ((context, label), label) for a loss on the batch's positives."""
  context = tf.TensorSpec([None, max_context_length], tf.int32)
  label = tf.TensorSpec([None], tf.int32)
  return ((context, label) if candidates == "batch" else context), label


def retrieval_model_fn(model_config: dual_encoder.DualEncoderConfig,
                       objective: registry.ObjectiveConfig,
                       ks: Sequence[int] = (), seed: int = 0) -> ModelFn:
  """A `model_fn` wrapping a fresh dual encoder, its loss and recall metrics.

  Recall metrics on training batches (`ks`) cost seven rankings over the whole
  vocabulary per step; the run loop leaves them out and evaluates the server
  model on held-out users instead. They need the [B, V] scores: with `ks`, the
  objective must read every item (`Objective.candidates` "vocabulary").
  The model trained is the objective's `dual_encoder.training_model`; its
  weights are the full dual encoder's, in the same order.
  """

  if ks and objective.build().candidates != "vocabulary":
    raise ValueError(f"recall metrics on training batches need the scores of every "
                     f"item, which --loss={objective.loss} does not train on")

  def model_fn() -> tff.learning.models.VariableModel:
    built = objective.build()
    return variable_model.KerasVariableModel(
        dual_encoder.training_model(
            dual_encoder.build_dual_encoder(model_config, seed=seed), built.candidates),
        loss=built.loss,
        input_spec=input_spec(model_config.max_context_length, built.candidates),
        metrics=recall_metrics.retrieval_metrics(ks) if ks else [])

  return model_fn


@dataclasses.dataclass(frozen=True)
class FedAvgConfig:
  """FedAvg's or FedSGD's optimization (names follow the flags); each task
  family has its defaults. `server_epsilon` None: TFF's; `dp`: client-level
  DP (the updates clipped, summed, noised)."""
  algorithm: str = "fedavg"
  client_optimizer: str = "sgd"
  client_learning_rate: float = 0.1
  server_optimizer: str = "adam"
  server_learning_rate: float = 0.05
  server_learning_rate_half_life: float = 0.0  # Rounds; 0: a constant rate.
  server_epsilon: Optional[float] = None
  # Each client batch's step compiled with XLA (shards of clients only).
  client_jit_compile: bool = False
  dp: Optional[differential_privacy.DPConfig] = None

  def __post_init__(self):
    if self.algorithm not in ALGORITHMS:
      raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)}, "
                       f"got '{self.algorithm}'")
    if self.server_learning_rate_half_life < 0:
      raise ValueError("--server_learning_rate_half_life must be >= 0 (0: a constant "
                       f"rate), got {self.server_learning_rate_half_life}")

  def check_loop(self, loop) -> None:
    """Refuses a loop this optimization cannot run on."""
    differential_privacy.check_compatible(loop, self.dp)
    if self.client_jit_compile and not shards_of(loop, self.dp):
      raise ValueError("--client_jit_compile: only shards of clients compile their step "
                       "(TFF's own client work does not); use --client_shards > 0"
                       + (" (a DP run trains one TFF client per client)"
                          if self.dp is not None else ""))


def build_learning_process(model_fn: ModelFn, config: FedAvgConfig, loop
                           ) -> tff.learning.templates.LearningProcess:
  """FedAvg (weighted by examples) or FedSGD with the optimizers of `config`
  on `loop`'s rounds (`clients_per_round`, `client_shards`, `batch_size`).
  With shards (`shards_of`), `next` takes shards of clients
  (`client_shards.build_sharded_process`); DP runs take one dataset per
  client. With `dp`, the clients' updates are averaged unweighted,
  clipped and noised (`differential_privacy`)."""
  config.check_loop(loop)
  server_optimizer = optimizers.tff_optimizer(
      config.server_optimizer, config.server_learning_rate, "server_optimizer",
      epsilon=config.server_epsilon)
  if config.server_learning_rate_half_life:
    server_optimizer = optimizers.with_half_life(
        server_optimizer, config.server_learning_rate,
        config.server_learning_rate_half_life, "server_learning_rate_half_life")
  dp_aggregator = (None if config.dp is None else differential_privacy.aggregator(
      config.dp, loop.clients_per_round))
  client_optimizer = (None if config.algorithm == "fedsgd" else optimizers.tff_optimizer(
      config.client_optimizer, config.client_learning_rate, "client_optimizer"))
  if shards_of(loop, config.dp):
    return client_shards.build_sharded_process(model_fn, server_optimizer,
                                               client_optimizer, config.client_jit_compile,
                                               loop.batch_size)
  if config.algorithm == "fedsgd":
    return tff.learning.algorithms.build_fed_sgd(
        model_fn, server_optimizer_fn=server_optimizer,
        model_aggregator=(dp_aggregator and
                          tff.aggregators.as_weighted_aggregator(dp_aggregator)),
        loop_implementation=CLIENT_LOOP)
  if dp_aggregator is not None:
    return tff.learning.algorithms.build_unweighted_fed_avg(
        model_fn, client_optimizer_fn=client_optimizer,
        server_optimizer_fn=server_optimizer, model_aggregator=dp_aggregator,
        loop_implementation=CLIENT_LOOP)
  return tff.learning.algorithms.build_weighted_fed_avg(
      model_fn, client_optimizer_fn=client_optimizer,
      server_optimizer_fn=server_optimizer, loop_implementation=CLIENT_LOOP)


def shards_of(loop, dp=None) -> int:
  """The shards a round's clients are trained in (0: a TFF client each): the
  loop's `client_shards` without DP (clipping is per client)."""
  return 0 if dp is not None else loop.client_shards


def bytes_per_client(weight_shapes: Sequence[Sequence[int]]) -> Tuple[int, int]:
  """(download, upload) bytes of one client in one round: the whole model down,
  its delta (FedAvg) or gradient (FedSGD, the same shapes) up."""
  model = 4 * sum(int(np.prod(s)) for s in weight_shapes)
  return model, model


def assign_weights(process: tff.learning.templates.LearningProcess, state,
                   keras_model: tf.keras.Model) -> None:
  """Copies the server model into a Keras model, refusing mismatched shapes.

  (`ModelWeights.assign_weights_to` zips silently.)
  """
  weights = process.get_model_weights(state)
  expected = [tuple(v.shape) for v in keras_model.trainable_variables]
  given = [tuple(np.shape(w)) for w in weights.trainable]
  if expected != given:
    raise ValueError(f"Server model weights {given} do not fit the Keras model "
                     f"{expected}")
  weights.assign_weights_to(keras_model)
