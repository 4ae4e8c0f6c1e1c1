"""Federated training of an image classifier from PU clients (paper 001).

Every method (FedPU, Baseline-1 `positive_only`, `pu_single_negative`,
`supervised`) is the project's FedAvg process (`fedavg.build_learning_process`)
over a Keras classifier whose loss is `losses.pu_risk.PURiskLoss`; the methods
differ only in the coefficients each client's points carry
(`PUTask.client_datasets`): the baselines' are one-hot, which makes the risk
plain cross-entropy. The run is the shared loop's (`federated_loop.run_federated`):
sampling, checkpoints and resume, metrics.csv with the bytes per client,
early stopping on validation accuracy.
"""

import dataclasses
from typing import Any, Dict, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import fedavg
from fed_retrieval.evaluation import units
from fed_retrieval.models import image_classifier
from fed_retrieval.models import variable_model
from fed_retrieval.training import federated_loop
from losses import pu_risk
from tasks import atomic_output
from tasks.pu.pu_task import PUTask


# Paper 001 trains one local epoch over batches of 100 on clients of 6,000 to
# 30,000 MNIST images; from clients of this many points on, so does a run.
PAPER_LOCAL_WORK = {"batch_size": 100, "local_epochs": 1}
PAPER_CLIENT_POINTS = 500


@dataclasses.dataclass(frozen=True)
class PUFederatedConfig:
  """A PU run: the method, its risk's options, the CNN and FedAvg's settings
  (`federated` gives the optimizers and the loop; its `objective` is unused).

  Defaults (README, "FedPU"): the paper's FedAvg (server SGD 1.0) with every
  client in every round, for a fixed 60 passes (rounds); client SGD 0.05. Local work
  is sized to the clients' data (`sized_to`, unless `size_local_work` is
  off, as when --batch_size or --local_epochs is given): clients of
  `PAPER_CLIENT_POINTS` points or more on average (MNIST-sized data) take
  the paper's one epoch over batches of 100; smaller ones (digits: 130-430
  points, where an epoch of 100 would be a few steps, too few for the client
  drift the paper's Baseline-1 suffers) five epochs over batches of 16.
  """
  method: str = "fedpu"
  surrogate: str = "probability"
  non_negative: bool = False
  conv_filters: Tuple[int, ...] = (32, 64)
  dense_units: int = 128
  federated: federated_loop.FederatedConfig = federated_loop.FederatedConfig(
      max_passes=60.0, min_passes=0.0, clients_per_round=10, local_epochs=5,
      max_local_steps=None,
      batch_size=16,
      client_learning_rate=0.05, server_optimizer="sgd", server_learning_rate=1.0,
      server_epsilon=None, client_jit_compile=False,
      eval_every=5, checkpoint_every=10, patience=0)
  size_local_work: bool = True

  def __post_init__(self):
    if self.method not in pu_risk.METHODS:
      raise ValueError(f"--methods: unknown method '{self.method}'; choose from "
                       f"{', '.join(pu_risk.METHODS)}")
    pu_risk.PURiskLoss(self.surrogate)  # Validates the surrogate.

  def sized_to(self, task: PUTask) -> "PUFederatedConfig":
    """This config with its local work sized to the task's clients (module
    docstring): what a run records and trains with."""
    if not self.size_local_work:
      return self
    loop = self.federated
    if task.mean_client_points() >= PAPER_CLIENT_POINTS:
      loop = dataclasses.replace(loop, **PAPER_LOCAL_WORK)
    return dataclasses.replace(self, federated=loop, size_local_work=False)

  def loss(self) -> pu_risk.PURiskLoss:
    """The risk every method trains (the baselines' coefficients make it
    cross-entropy on their points)."""
    return pu_risk.PURiskLoss(self.surrogate, self.non_negative)


def model_config_for(task: PUTask, config: PUFederatedConfig
                     ) -> image_classifier.ImageClassifierConfig:
  return image_classifier.ImageClassifierConfig(
      task.input_shape, task.num_classes, tuple(config.conv_filters),
      config.dense_units)


def pu_model_fn(model_config: image_classifier.ImageClassifierConfig,
                config: PUFederatedConfig) -> fedavg.ModelFn:
  input_spec = (tf.TensorSpec((None,) + tuple(model_config.input_shape), tf.float32),
                tf.TensorSpec([None, 3 * model_config.num_classes + 1], tf.float32))

  def model_fn() -> tff.learning.models.VariableModel:
    return variable_model.KerasVariableModel(
        image_classifier.build_image_classifier(model_config, config.federated.seed),
        loss=config.loss(), input_spec=input_spec)

  return model_fn


def export_classifier(model: tf.keras.Model, directory: str) -> None:
  """The Keras classifier (images -> logits) as a SavedModel; whole or not at all."""
  with atomic_output.staged_directory(directory, "output_dir", replace=True) as staging:
    model.save(staging)


def majority_class_baseline(task: PUTask) -> Dict[str, float]:
  """The trivial baseline: test accuracy of predicting the class most frequent
  among the training points (by their hidden labels) for every image."""
  majority = np.argmax(np.bincount(task.train.labels, minlength=task.num_classes))
  hits = task.test.labels == majority
  return {"accuracy": float(np.mean(hits)),
          "accuracy_se": units.per_point(hits).standard_error()}


def evaluate_classifier(model: tf.keras.Model, points) -> Dict[str, Any]:
  """Accuracy over `points` (images, labels), with its units (per image)."""
  hits = image_classifier.correct(model, points.images, points.labels)
  return {"accuracy": float(np.mean(hits)), units.UNITS: units.per_point(hits)}


def train_pu_federated(task: PUTask, config: PUFederatedConfig, output_dir: str) -> Dict[str, Any]:
  """Trains (or resumes) one method on the PU task; exports the classifier."""
  config = config.sized_to(task)
  model_config = model_config_for(task, config)
  splits = {"validation": task.validation, "test": task.test}
  job = federated_loop.FederatedJob(
      name=f"{task.config.setting.describe()} {config.method}",
      run_config={"task": task.config.describe(),
                  "model": dataclasses.asdict(model_config),
                  "training": dataclasses.asdict(config)},
      build_process=lambda: fedavg.build_learning_process(
          pu_model_fn(model_config, config), config.federated),
      clients=task.client_datasets(config.method),
      build_server_model=lambda: image_classifier.build_image_classifier(model_config),
      evaluate=lambda model, split: evaluate_classifier(model, splits[split]),
      monitored="accuracy",
      export=export_classifier,
      results={"method": config.method, "setting": task.config.setting.describe()},
      baselines=lambda: {"majority_class_baseline": majority_class_baseline(task)},
      round_metrics=dict(zip(("bytes_down_per_client", "bytes_up_per_client"),
                             fedavg.bytes_per_client(model_config.weight_shapes()))),
      client_shards=fedavg.shards_of(config.federated))
  return federated_loop.run_federated(job, config.federated, output_dir)
