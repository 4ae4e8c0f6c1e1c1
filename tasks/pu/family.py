"""The PU family: an image classifier from positive-and-unlabeled clients (paper 001).

Every method (FedPU, Baseline-1 `positive_only`, `pu_single_negative`,
`supervised`) is the project's FedAvg (`fedavg.build_learning_process`) of a
small CNN whose loss is `losses.pu_risk.PURiskLoss`; the methods differ only
in the coefficients each client's points carry (`PUTask.client_datasets`):
the baselines' are one-hot, which makes the risk plain cross-entropy. A
comparison has a group per setting of the paper's Tables 1-3 (the partition,
the classes each client labels), each with the centralized reference (the
CNN on every training image with its label, the same for every setting) and
the majority class as the trivial baseline.
"""

import dataclasses
from typing import Any, Dict, List, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import fedavg
from fed_retrieval.evaluation import units
from fed_retrieval.models import image_classifier
from fed_retrieval.models import variable_model
from fed_retrieval.training import federated_loop
from fed_retrieval.training.centralized_loop import CentralizedJob
from tasks import atomic_output
from tasks import family
from tasks.pu import flags as pu_flags
from tasks.pu import pu_task
from tasks.pu.pu_task import PUTask
from tasks.pu.settings import PUSettings

REFERENCE = "centralized_supervised"
BASELINE = "majority_class"


def model_config_for(task: PUTask, settings: PUSettings
                     ) -> image_classifier.ImageClassifierConfig:
  return image_classifier.ImageClassifierConfig(
      task.input_shape, task.num_classes, tuple(settings.conv_filters),
      settings.dense_units)


def pu_model_fn(model_config: image_classifier.ImageClassifierConfig,
                settings: PUSettings) -> fedavg.ModelFn:
  input_spec = (tf.TensorSpec((None,) + tuple(model_config.input_shape), tf.float32),
                tf.TensorSpec([None, 3 * model_config.num_classes + 1], tf.float32))

  def model_fn() -> tff.learning.models.VariableModel:
    return variable_model.KerasVariableModel(
        image_classifier.build_image_classifier(model_config, settings.loop.seed),
        loss=settings.loss(), input_spec=input_spec)

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


def _evaluation(task: PUTask):
  splits = {"validation": task.validation, "test": task.test}
  return lambda model, split: evaluate_classifier(model, splits[split])


def federated_job(task: PUTask, settings: PUSettings, method: str
                  ) -> federated_loop.FederatedJob:
  """`method`'s FedAvg of the CNN on the task's clients; exports the classifier."""
  model_config = model_config_for(task, settings)
  loop = settings.loop_for(task)
  return federated_loop.FederatedJob(
      name=f"{task.config.setting.describe()} {method}",
      run_config={"task": task.config.describe(),
                  "model": dataclasses.asdict(model_config),
                  "training": {"method": method, "surrogate": settings.surrogate,
                               "non_negative": settings.non_negative,
                               "fedavg": settings.fedavg, "loop": loop}},
      build_process=lambda: fedavg.build_learning_process(
          pu_model_fn(model_config, settings), settings.fedavg, loop),
      clients=task.client_datasets(method),
      build_server_model=lambda: image_classifier.build_image_classifier(model_config),
      evaluate=_evaluation(task), monitored="accuracy", export=export_classifier,
      results={"method": method, "setting": task.config.setting.describe()},
      baselines=lambda: {"majority_class_baseline": majority_class_baseline(task)},
      round_metrics=dict(zip(("bytes_down_per_client", "bytes_up_per_client"),
                             fedavg.bytes_per_client(model_config.weight_shapes()))),
      client_shards=fedavg.shards_of(loop, settings.fedavg.dp), dp=settings.fedavg.dp,
      central=federated_loop.CentralModel(
          lambda: image_classifier.build_image_classifier(model_config), settings.loss()))


def centralized_job(task: PUTask, settings: PUSettings) -> CentralizedJob:
  """The CNN trained centrally on every training image with its label. Its run
  config leaves out the setting (the partition): one reference serves all."""
  model_config = model_config_for(task, settings)
  described = {k: v for k, v in task.config.describe().items()
               if k not in ("setting", "labeled_fraction", "priors")}
  return CentralizedJob(
      name=REFERENCE,
      run_config={"task": described, "model": dataclasses.asdict(model_config),
                  "training": {"centralized": settings.centralized}},
      build_model=lambda: image_classifier.build_image_classifier(
          model_config, settings.centralized.seed),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      train_arrays=lambda: (task.train.images, task.train.labels.astype(np.int32)),
      num_examples=len(task.train.labels), evaluate=_evaluation(task),
      monitored="accuracy", export=export_classifier, results={"method": REFERENCE},
      baselines=lambda: {"majority_class_baseline": majority_class_baseline(task)})


class PUFamily(family.TaskFamily):
  """Image classification from clients with positive and unlabeled data."""
  name = "pu"
  relative_gaps = False
  help_groups = pu_flags.HELP_GROUPS

  def columns(self, settings: PUSettings) -> List[Tuple[str, str]]:
    return [("accuracy", "accuracy")]

  def headline(self, settings: PUSettings) -> str:
    return "accuracy"

  def settings_from_flags(self) -> PUSettings:
    return pu_flags.settings_from_flags()

  def _task(self, settings: PUSettings, setting: pu_task.PUSetting) -> PUTask:
    return pu_task.build_pu_task(dataclasses.replace(settings.task, setting=setting))

  def federated_run(self, settings: PUSettings) -> family.FederatedRun:
    task = pu_task.build_pu_task(settings.task)
    return family.FederatedRun(settings.method,
                               lambda: federated_job(task, settings, settings.method),
                               settings.loop_for(task), REFERENCE)

  def centralized_run(self, settings: PUSettings) -> family.CentralizedRun:
    task = pu_task.build_pu_task(settings.task)
    return family.CentralizedRun(REFERENCE, lambda: centralized_job(task, settings),
                                 settings.centralized)

  def comparison(self, settings: PUSettings) -> List[family.Group]:
    """A group per setting: each method, the centralized reference, the
    majority class."""
    groups = []
    for name, setting in settings.settings:
      task = self._task(settings, setting)
      groups.append(family.Group(
          f"{name} ({setting.describe()})",
          [family.FederatedRun(method,
                               lambda t=task, m=method: federated_job(t, settings, m),
                               settings.loop_for(task), REFERENCE)
           for method in settings.methods],
          [family.CentralizedRun(REFERENCE, lambda t=task: centralized_job(t, settings),
                                 settings.centralized)],
          BASELINE, lambda t=task: majority_class_baseline(t)))
    return groups
