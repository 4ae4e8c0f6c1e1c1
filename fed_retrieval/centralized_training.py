"""Centralized training of the dual encoder with Keras `fit`, resumable.

The output directory holds `run_config.json`, `metrics.csv` and `tensorboard/`
(per-epoch training and evaluation metrics), `backup/` (Keras BackupAndRestore:
a killed run resumes from its last finished epoch), `checkpoint/` (final
weights), `export/` and `results.json`.
"""

import dataclasses
import math
import os
import sys
from typing import Any, Dict, Optional, Tuple

import tensorflow as tf

from fed_retrieval import dual_encoder
from fed_retrieval import evaluation
from fed_retrieval import export
from fed_retrieval import optimizers
from fed_retrieval import recall_metrics
from fed_retrieval import run_directory
from losses import registry
from tasks import client_data
from tasks.movielens_task import MovieLensTask

CHECKPOINT = os.path.join("checkpoint", "weights")


@dataclasses.dataclass(frozen=True)
class CentralizedConfig:
  """How the centralized model is trained."""
  loss: str = "global_softmax"
  spreadout_weight: Optional[float] = None
  temperature: float = 0.05
  margin: float = 0.9
  batch_size: int = 16
  epochs: int = 1
  steps: Optional[int] = None
  optimizer: str = "adam"
  learning_rate: float = 0.01
  seed: int = 0
  split: str = "example"
  ks: Tuple[int, ...] = (1, 5, 10)
  steps_per_execution: int = 50

  def __post_init__(self):
    if self.split not in ("example", "user"):
      raise ValueError(f"--split_by must be 'example' or 'user', got '{self.split}'")
    if self.epochs < 1:
      raise ValueError(f"--epochs must be >= 1, got {self.epochs}")
    if self.steps is not None and self.steps < 1:
      raise ValueError(f"--steps must be >= 1, got {self.steps}")


def model_config_for(task: MovieLensTask, objective: registry.Objective,
                     embedding_dim: int = 16, context_hidden_dims=(),
                     item_hidden_dims=()) -> dual_encoder.DualEncoderConfig:
  return dual_encoder.DualEncoderConfig(
      vocabulary_size=task.vocabulary_size,
      max_context_length=task.config.max_context_length,
      embedding_dim=embedding_dim,
      context_hidden_dims=tuple(context_hidden_dims),
      item_hidden_dims=tuple(item_hidden_dims),
      spreadout_weight=objective.spreadout_weight)


def training_schedule(num_examples: int, batch_size: int, epochs: int,
                      steps: Optional[int]) -> Tuple[int, int]:
  """(Keras epochs, steps per epoch): whole passes, or `steps` in equal chunks.

  With `steps`, a chunk is at most one pass over the data and the total is
  rounded up to a whole number of chunks (at most chunks - 1 extra steps).
  """
  steps_per_pass = math.ceil(num_examples / batch_size)
  if steps is None:
    return epochs, steps_per_pass
  chunks = math.ceil(steps / steps_per_pass)
  return chunks, math.ceil(steps / chunks)


def train_centralized(task: MovieLensTask, config: CentralizedConfig,
                      output_dir: str, embedding_dim: int = 16,
                      verbose: Optional[int] = None) -> Dict[str, Any]:
  """Trains (or resumes, or returns the finished run's results) and exports."""
  objective = registry.objective(config.loss, config.spreadout_weight,
                                 config.temperature, config.margin)
  model_config = model_config_for(task, objective, embedding_dim)
  run_config = {"setting": "centralized", "task": task.config.describe(),
                "model": dataclasses.asdict(model_config),
                "training": dataclasses.asdict(config)}
  finished = run_directory.open_run(output_dir, run_config)
  if finished is not None:
    return finished

  if config.split == "example":
    train, curve, test = (task.centralized_train, task.centralized_test,
                          task.centralized_test)
  else:
    train, curve, test = task.federated_train, task.federated_val, task.federated_test
  epochs, steps_per_epoch = training_schedule(len(train), config.batch_size,
                                              config.epochs, config.steps)
  tf.keras.utils.set_random_seed(config.seed)
  model = dual_encoder.build_dual_encoder(model_config, seed=config.seed)
  model.compile(optimizer=optimizers.keras_optimizer(config.optimizer,
                                                     config.learning_rate),
                loss=objective.loss,
                metrics=recall_metrics.retrieval_metrics(config.ks),
                steps_per_execution=config.steps_per_execution)
  train_data = client_data.centralized_dataset(
      train, config.batch_size, shuffle_seed=config.seed, epochs=1).repeat()
  curve_data = client_data.centralized_dataset(
      curve, config.batch_size, shuffle_seed=evaluation.EVALUATION_SEED)
  callbacks = [
      tf.keras.callbacks.BackupAndRestore(os.path.join(output_dir, "backup")),
      tf.keras.callbacks.CSVLogger(os.path.join(output_dir, "metrics.csv"),
                                   append=True),
      tf.keras.callbacks.TensorBoard(os.path.join(output_dir, "tensorboard"),
                                     write_graph=False),
  ]
  if verbose is None:
    verbose = 1 if sys.stdout.isatty() else 2
  model.fit(train_data, epochs=epochs, steps_per_epoch=steps_per_epoch,
            validation_data=curve_data, callbacks=callbacks, verbose=verbose)
  model.save_weights(os.path.join(output_dir, CHECKPOINT))
  export.export_model(model, model_config, os.path.join(output_dir, "export"))

  results = {
      "setting": "centralized",
      "loss": config.loss,
      "steps": epochs * steps_per_epoch,
      "examples_seen": epochs * steps_per_epoch * config.batch_size,
      "test": evaluation.evaluate(model, test, config.ks, config.batch_size),
      "most_popular_baseline": evaluation.evaluate(
          evaluation.popularity_score_fn(train, task.vocabulary_size), test,
          config.ks, config.batch_size),
  }
  run_directory.write_json(os.path.join(output_dir, run_directory.RESULTS), results)
  return results
