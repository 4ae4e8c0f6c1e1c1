"""Centralized training with Keras `fit`, resumable: one loop for every task.

`run_centralized` trains a `CentralizedJob` (a model, its loss, its training
batches, how to evaluate and export it) as a `CentralizedConfig` says; the
task families build the jobs.

The output directory holds `run_config.json`, `metrics.csv` and `tensorboard/`
(training loss and validation recall at every evaluation), `backup/` (Keras
BackupAndRestore: a killed run resumes from its last finished evaluation),
`best/` (the reported evaluation's weights when stopping early),
`checkpoint/` (the reported weights), `export/` and `results.json`.
"""

import csv
import dataclasses
import math
import os
from typing import Any, Callable, Dict, Optional, Tuple

import tensorflow as tf

from fed_retrieval.algorithms import optimizers
from fed_retrieval.training import chunked_steps
from fed_retrieval.training import early_stopping
from fed_retrieval.training import progress
from fed_retrieval.training import run_directory
from fed_retrieval.training import validation_curve
from tasks import client_data

CHECKPOINT = os.path.join("checkpoint", "weights")


@dataclasses.dataclass(frozen=True)
class CentralizedConfig:
  """How a centralized run is trained: the optimizer, and the budget of
  `steps` batches or else `epochs` passes, evaluated every `eval_every_steps`
  (default: once a pass). With `patience` > 0 a run stops that many
  evaluations after its last gain (`early_stopping`), not before `min_passes`,
  and reports the evaluated model the rule names; with 0 it trains the whole
  budget and reports the final model."""
  optimizer: str = "adam"
  learning_rate: float = 0.01
  batch_size: int = 16
  epochs: Optional[int] = 1
  steps: Optional[int] = None
  eval_every_steps: Optional[int] = None
  min_passes: Optional[float] = 0.0  # None: 0, unless a family sets it.
  patience: int = 0
  min_improvement_se: float = 1.0
  smoothing: int = 1
  report_model: Optional[str] = None  # None: last_gain (runs made before it).
  steps_per_execution: int = 100
  seed: int = 0
  # Each batch's step compiled with XLA; None: the family's choice.
  jit_compile: Optional[bool] = None

  def __post_init__(self):
    for name in ("epochs", "steps", "eval_every_steps"):
      if getattr(self, name) is not None and getattr(self, name) < 1:
        raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")
    self.stopping_rule  # Validates the stopping flags.

  @property
  def stopping_rule(self) -> early_stopping.StoppingRule:
    return early_stopping.StoppingRule.from_flags(**early_stopping.stopping_fields(self))


def training_schedule(num_examples: int, batch_size: int, epochs: Optional[int],
                      steps: Optional[int], eval_every_steps: Optional[int] = None
                      ) -> Tuple[int, int]:
  """(Keras epochs, steps per epoch): a Keras epoch ends with an evaluation.

  The budget is `steps`, or `epochs` whole passes. Without `eval_every_steps`,
  it is cut into equal chunks of at most one pass each; with it, into chunks
  of that many steps. The total is rounded up to whole chunks.
  """
  steps_per_pass = math.ceil(num_examples / batch_size)
  if steps is None and epochs is None:
    raise ValueError("a centralized run needs a budget: --epochs or --steps")
  total = steps if steps is not None else epochs * steps_per_pass
  if eval_every_steps is not None:
    return math.ceil(total / eval_every_steps), eval_every_steps
  chunks = math.ceil(total / steps_per_pass)
  return chunks, math.ceil(total / chunks)


class ValidationAndStopping(tf.keras.callbacks.Callback):
  """At each Keras epoch's end: evaluates the validation split, logs it, keeps
  the reported model's weights (`validation_curve`), and stops training when
  the stopping rule says so, past `min_steps`.

  It writes metrics.csv (a row an evaluation: the epoch, the training loss,
  the examples seen, the curve's split's metrics prefixed by its name); a
  resumed run reads its curve back from that file. (Keras's CSVLogger would
  add empty `val_` columns to a curve drawn on the test split.)
  """

  def __init__(self, evaluate_fn: Callable[[tf.keras.Model], Dict[str, Any]],
               rule: early_stopping.StoppingRule, curve_split: str, monitored: str,
               steps_per_epoch: int, batch_size: int, min_steps: int,
               metrics_path: str, label: str, epochs: int, output_dir: str):
    super().__init__()
    self._epochs = epochs
    self._output_dir = output_dir
    self.lines: Optional[progress.ProgressLines] = None
    self._evaluate_fn = evaluate_fn
    self._rule = rule
    self._curve_split = curve_split
    self._metric = monitored
    self._steps_per_epoch = steps_per_epoch
    self._batch_size = batch_size
    self._min_steps = min_steps
    self._metrics_path = metrics_path
    self._label = label
    self.curve: Optional[validation_curve.ValidationCurve] = None

  def on_epoch_begin(self, epoch: int, logs=None) -> None:
    if self.curve is None:  # The first epoch this process trains.
      done = epoch * self._steps_per_epoch
      self.curve = validation_curve.ValidationCurve(
          self._rule, self._output_dir,
          validation_curve.read_curve(
              self._metrics_path, self._curve_split, self._metric,
              lambda row: (int(row["epoch"]) + 1) * self._steps_per_epoch, done),
          min_step=self._min_steps)
      self.lines = progress.ProgressLines(
          self._label, "step", self._epochs * self._steps_per_epoch, done,
          may_stop_early=bool(self._rule.patience))
      self.lines.say(run_directory.starting_line(self._output_dir, done, "step"))

  def _append_row(self, row: Dict[str, Any]) -> None:
    new_file = not os.path.isfile(self._metrics_path)
    with open(self._metrics_path, "a", newline="") as f:
      writer = csv.DictWriter(f, fieldnames=sorted(row, key=lambda k: (k != "epoch", k)))
      if new_file:
        writer.writeheader()
      writer.writerow(row)

  def on_epoch_end(self, epoch: int, logs=None) -> None:
    logs = logs if logs is not None else {}
    steps = (epoch + 1) * self._steps_per_epoch
    logs["examples_seen"] = steps * self._batch_size
    logs.update({f"{self._curve_split}_{k}": v for k, v in self.curve.record(
        steps, self._evaluate_fn(self.model), self._metric, self.model).items()})
    self._append_row({"epoch": epoch, **logs})
    self.lines.report(steps, f"loss {logs.get('loss', math.nan):.4f}, "
                      f"{self._curve_split} {self._metric} {self.curve.latest:.4f}")
    if self.curve.should_stop(steps):
      self.model.stop_training = True


@dataclasses.dataclass
class CentralizedJob:
  """One model trained centrally, as the loop sees it (the counterpart of
  `federated_loop.FederatedJob`): the loop never asks which task it runs."""
  name: str
  run_config: Dict[str, Any]
  build_model: Callable[[], tf.keras.Model]  # Uncompiled; evaluated and exported.
  loss: Any  # A Keras loss.
  # (inputs, labels) of every training example, as arrays; the loop shuffles
  # them (`config.seed`) into batches, a chunk of them a Keras step.
  train_arrays: Callable[[], Any]
  num_examples: int  # One pass.
  evaluate: Callable[[tf.keras.Model, str], Dict[str, float]]  # "validation"/"test".
  monitored: str  # The key of `evaluate`'s metrics the stopping rule watches.
  export: Callable[[tf.keras.Model, str], None]
  results: Dict[str, Any]  # Added to results.json.
  # The split the curve is drawn on, as metrics.csv names it: "val", or
  # "test" where there are no validation examples (MovieLens --split_by=example).
  curve_split: str = "val"
  # Trivial baselines on the test split, added to results.json after training.
  baselines: Callable[[], Dict[str, Any]] = dict
  # Writes the run's own files beside its config (the MovieLens item ids).
  write_files: Callable[[str], Any] = lambda directory: None
  # What `fit` trains, from the built model: the model itself, or a model on
  # the same weights that gives the loss only the scores it reads.
  training_model: Callable[[tf.keras.Model], tf.keras.Model] = lambda model: model
  # Each batch's training step compiled with XLA (the same step, fused),
  # unless the config says otherwise.
  jit_compile: bool = False


def run_centralized(job: CentralizedJob, config, output_dir: str) -> Dict[str, Any]:
  """Trains (or resumes, or returns the finished run's results) and exports.

  `config` gives the loop's settings: batch_size, epochs (the cap in passes),
  steps, eval_every_steps, min_passes, stopping_rule, optimizer,
  learning_rate, steps_per_execution (the batches a Keras step trains,
  `chunked_steps`) and seed.
  """
  finished = run_directory.open_run(output_dir, job.run_config, job.write_files)
  if finished is not None:
    return finished
  epochs, steps_per_epoch = training_schedule(job.num_examples, config.batch_size,
                                              config.epochs, config.steps,
                                              config.eval_every_steps)
  steps_per_pass = job.num_examples / config.batch_size
  tf.keras.utils.set_random_seed(config.seed)
  model = job.build_model()
  trained = chunked_steps.ChunkedSteps.on(  # The same variables.
      job.training_model(model), batch_jit_compile=(
          job.jit_compile if config.jit_compile is None else config.jit_compile))
  # No metrics in `fit`: a metric over the whole vocabulary (or class table) on
  # every training batch would cost more than the training step; the callback
  # evaluates whole splits instead.
  trained.compile(optimizer=optimizers.keras_optimizer(config.optimizer,
                                                       config.learning_rate),
                  loss=job.loss)
  metrics_path = os.path.join(output_dir, "metrics.csv")
  validation = ValidationAndStopping(
      lambda _: job.evaluate(model, "validation"), config.stopping_rule,
      job.curve_split, job.monitored, steps_per_epoch, config.batch_size,
      math.ceil((config.min_passes or 0) * steps_per_pass), metrics_path, job.name, epochs,
      output_dir)
  callbacks = [
      # Kept after training, so a larger --epochs extends a finished run.
      tf.keras.callbacks.BackupAndRestore(os.path.join(output_dir, "backup"),
                                          delete_checkpoint=False),
      validation,
      tf.keras.callbacks.TensorBoard(os.path.join(output_dir, "tensorboard"),
                                     write_graph=False),
  ]
  chunks = client_data.shuffled_chunks(job.train_arrays(), config.batch_size,
                                       steps_per_epoch, config.steps_per_execution,
                                       config.seed)
  trained.fit(chunks, epochs=epochs,
              steps_per_epoch=math.ceil(steps_per_epoch / config.steps_per_execution),
              callbacks=callbacks, verbose=0)
  trained_steps = best_step = validation.curve.curve[-1].step
  if config.stopping_rule.patience:
    best_step = validation.curve.restore_best(trained)  # Saved from it.
  model.save_weights(os.path.join(output_dir, CHECKPOINT))
  job.export(model, os.path.join(output_dir, "export"))
  results = {
      **job.results,
      "steps": trained_steps,
      "best_step": best_step,
      "passes": trained_steps / steps_per_pass,
      "best_passes": best_step / steps_per_pass,
      "examples_seen": trained_steps * config.batch_size,
      "test": validation_curve.test_metrics(job.evaluate(model, "test"), job.monitored,
                                            output_dir),
      **job.baselines(),
  }
  run_directory.write_json(os.path.join(output_dir, run_directory.RESULTS), results)
  validation.lines.say(run_directory.finished_line(output_dir, trained_steps, best_step,
                                                   "step"))
  return results
