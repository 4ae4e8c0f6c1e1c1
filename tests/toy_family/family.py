"""A toy task family, to show what a new family is: this folder and a
`registry.register` call. Points in 2-D of 3 classes (a Gaussian blob each),
6 clients of two classes each; a softmax regression under FedAvg, the same
model trained centrally, the majority class as the baseline."""

import dataclasses
from typing import Any, Dict, List, Tuple

import numpy as np
import tensorflow as tf

from fed_retrieval.algorithms import fedavg
from fed_retrieval.evaluation import units
from fed_retrieval.models import variable_model
from fed_retrieval.training import federated_loop
from fed_retrieval.training.centralized_loop import CentralizedConfig
from fed_retrieval.training.centralized_loop import CentralizedJob
from fed_retrieval.training.loop_config import LoopConfig
from tasks import client_data
from tasks import family

CENTERS = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]], np.float32)


@dataclasses.dataclass(frozen=True)
class ToySettings:
  points_per_class: int = 150
  loop: LoopConfig = LoopConfig(clients_per_round=3, max_passes=30.0, min_passes=2.0,
                                eval_every=2, checkpoint_every=2, patience=3)
  centralized: CentralizedConfig = CentralizedConfig(learning_rate=0.05, epochs=20,
                                                     patience=3, min_passes=2.0)


def _points(settings: ToySettings, seed: int) -> Tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  labels = np.repeat(np.arange(3), settings.points_per_class).astype(np.int32)
  return (CENTERS[labels] + rng.normal(size=(len(labels), 2)).astype(np.float32),
          labels)


def _model() -> tf.keras.Model:
  inputs = tf.keras.Input(shape=(2,))
  return tf.keras.Model(inputs, tf.keras.layers.Dense(3)(inputs))


def _evaluate(splits: Dict[str, Tuple[np.ndarray, np.ndarray]]):
  def evaluate(model: tf.keras.Model, split: str) -> Dict[str, Any]:
    points, labels = splits[split]
    hits = np.argmax(model(points).numpy(), axis=1) == labels
    return {"accuracy": float(hits.mean()), units.UNITS: units.per_point(hits)}
  return evaluate


class ToyFamily(family.TaskFamily):
  """Three Gaussian blobs, clients of two classes each."""
  name = "toy"

  def __init__(self):
    self.settings = ToySettings()

  def columns(self, settings: ToySettings) -> List[Tuple[str, str]]:
    return [("accuracy", "accuracy")]

  def headline(self, settings: ToySettings) -> str:
    return "accuracy"

  def settings_from_flags(self) -> ToySettings:
    return self.settings

  def _data(self, settings: ToySettings):
    train, validation, test = (_points(settings, seed) for seed in (0, 1, 2))
    clients = {str(k): np.flatnonzero(np.isin(train[1], [k % 3, (k + 1) % 3]))[k // 3::2]
               for k in range(6)}
    splits = {"validation": validation, "test": test}
    return train, client_data.ClientDatasets(*train, clients), splits

  def federated_run(self, settings: ToySettings) -> family.FederatedRun:
    _, clients, splits = self._data(settings)
    spec = (tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None], tf.int32))
    loss = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model_fn = lambda: variable_model.KerasVariableModel(_model(), loss, spec)
    config = fedavg.FedAvgConfig(client_learning_rate=0.1, server_optimizer="sgd",
                                 server_learning_rate=1.0)
    job = lambda: federated_loop.FederatedJob(
        name="fedavg", run_config={"toy": settings},
        build_process=lambda: fedavg.build_learning_process(model_fn, config,
                                                            settings.loop),
        clients=clients, build_server_model=_model, evaluate=_evaluate(splits),
        monitored="accuracy", export=lambda model, directory: None, results={},
        client_shards=fedavg.shards_of(settings.loop))
    return family.FederatedRun("fedavg", job, settings.loop, "centralized")

  def centralized_run(self, settings: ToySettings) -> family.CentralizedRun:
    train, _, splits = self._data(settings)
    job = lambda: CentralizedJob(
        name="centralized", run_config={"toy": settings}, build_model=_model,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        train_arrays=lambda: train, num_examples=len(train[1]),
        evaluate=_evaluate(splits), monitored="accuracy",
        export=lambda model, directory: None, results={})
    return family.CentralizedRun("centralized", job, settings.centralized)

  def comparison(self, settings: ToySettings) -> List[family.Group]:
    test_labels = _points(settings, 2)[1]
    majority = lambda: {"accuracy": float(np.mean(test_labels == 0)),
                        "accuracy_se": units.per_point(test_labels == 0).standard_error()}
    return [family.Group("", [self.federated_run(settings)],
                         [self.centralized_run(settings)], "majority_class", majority)]
