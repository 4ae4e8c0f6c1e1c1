"""The federated run loop: sampling, rounds, evaluation, checkpoints, resume.

The output directory holds `run_config.json`, `checkpoints/` (tff.program
state, every `checkpoint_every` rounds and at round 0), `metrics.csv` and
`tensorboard/` (per round: training loss and metrics; every `eval_every`
rounds: the job's metrics of the server model on the validation split), `best/` (Keras
weights of the best validation evaluation so far), `checkpoint/` (the
reported model's Keras weights), `export/` and `results.json`.

Convergence: the run stops when the job's monitored validation metric
(MovieLens: recall@max(k); XC: precision@1) has not improved beyond its noise
for `patience` evaluations (`early_stopping.StoppingRule`, kept by
`validation_curve`), but not before `min_passes` expected visits per client
and `min_rounds` rounds, or at its cap (`rounds`, or `max_passes` visits); it
reports and exports the evaluated model the rule names (`report_model`: the
last gain beyond the noise, or the validation maximum). With `patience` 0 it
trains the whole cap and reports the final model.

Checkpoints appear whole or not at all, and an unreadable one is set aside
(`checkpoints`). Resuming: everything random is a function of (seed, round),
client sampling and client shuffles included, and the state is restored from
the latest checkpoint, so re-running a killed command finishes with the same
model as an uninterrupted run. Metrics rows after that checkpoint are
replaced; the validation curve (the stopping rule's only state) is read back
from them. A TFF worker that dies during a run (a crash of its C++ runtime,
the kernel's out-of-memory killer) is replaced and the run resumes the same
way, up to `tff_runtime.max_worker_restarts()` times (`--max_worker_restarts`);
results.json counts them (`worker_restarts`).
"""

import asyncio
import contextlib
import csv
import dataclasses
import os
import sys
from typing import Any, Callable, Dict, NamedTuple, Optional

import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import sub_model
from fed_retrieval.evaluation import recall_metrics
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import checkpoints
from fed_retrieval.training import progress
from fed_retrieval.training import round_calls
from fed_retrieval.training import run_directory
from fed_retrieval.training import validation_curve
from fed_retrieval.training.loop_config import LoopConfig
from tasks import client_data

CHECKPOINT = os.path.join("checkpoint", "weights")


def _examples_through(metrics_path: str, round_num: int) -> int:
  """The examples trained on through `round_num`, from the metrics."""
  if round_num == 0:
    return 0
  with open(metrics_path) as f:
    for row in csv.DictReader(f):
      if int(row["round"]) == round_num:
        return int(float(row["examples_seen"]))
  raise ValueError(f"{metrics_path}: no row for checkpointed round {round_num}")


def _privacy_of(dp: Optional[differential_privacy.DPConfig], clients_per_round: int,
                num_clients: int) -> Callable[[int], Dict[str, float]]:
  """round -> {epsilon, target_delta} after that many rounds of a DP run
  ({} without DP)."""
  if dp is None:
    return lambda round_num: {}
  probability = min(1.0, clients_per_round / num_clients)
  return lambda round_num: {
      "epsilon": differential_privacy.epsilon(dp, probability, round_num),
      "target_delta": dp.target_delta}


def _training_metrics(output_metrics) -> Dict[str, float]:
  train = output_metrics["client_work"]["train"]
  return {f"train_{recall_metrics.report_name(name)}": float(value)
          for name, value in train.items()}


class CentralModel(NamedTuple):
  """What trains centrally on the pooled examples of a job's clients (the
  throughput benchmark's contrast): a fresh Keras model, its loss, and
  whether its step compiles with XLA as the family's centralized runs do."""
  build_model: Callable[[], tf.keras.Model]
  loss: Any
  jit_compile: bool = False


@dataclasses.dataclass
class FederatedJob:
  """One federated algorithm on one task, as the run loop sees it.

  The loop never asks which algorithm or task it runs: it samples clients,
  calls `build_process()`'s `next`, copies `get_model_weights` into the Keras
  model of `build_server_model()` (built after the process: Keras models built
  before TFF traces its own fail), and calls `evaluate(model, "validation" or
  "test")` and `export(model, directory)`.
  """
  name: str
  run_config: Dict[str, Any]
  build_process: Callable[[], sub_model.Process]
  clients: client_data.ClientDatasets
  build_server_model: Callable[[], tf.keras.Model]
  evaluate: Callable[[tf.keras.Model, str], Dict[str, float]]
  monitored: str  # The key of `evaluate`'s metrics that early stopping watches.
  export: Callable[[tf.keras.Model, str], None]
  results: Dict[str, Any]  # Added to results.json.
  round_metrics: Dict[str, float] = dataclasses.field(default_factory=dict)
  # Trivial baselines on the test split, added to results.json after training.
  baselines: Callable[[], Dict[str, Any]] = dict
  # Writes the run's own files beside its config (the MovieLens item ids).
  write_files: Callable[[str], Any] = lambda directory: None
  # The shard datasets `next` takes (`fedavg.shards_of`); 0: one per client.
  client_shards: int = 0
  # Client-level DP: clients sampled by Poisson, epsilon in the metrics.
  dp: Optional[differential_privacy.DPConfig] = None
  central: Optional[CentralModel] = None


def run_federated(job: FederatedJob, config: LoopConfig, output_dir: str
                  ) -> Dict[str, Any]:
  """Trains (or resumes, or returns the finished run's results) and exports,
  as the loop `config` says."""
  finished = run_directory.open_run(output_dir, job.run_config, job.write_files)
  if finished is not None:
    return finished
  config = config.for_clients(len(job.clients.client_ids))
  while tff_runtime.take_worker_death():  # A worker that died after its last
    pass  # call in an earlier run: ensure_execution_context replaces it.
  restarts, death = 0, None
  limit = tff_runtime.max_worker_restarts()
  while True:
    # At the limit, a death ends the program as it always did (one line, exit 3).
    allowed = (tff_runtime.worker_restarts_allowed() if restarts < limit
               else contextlib.nullcontext())
    try:
      with allowed:
        return _train(job, config, output_dir, restarts, death)
    except Exception:  # pylint: disable=broad-except
      death = tff_runtime.take_worker_death()
      if death is None:  # Not the worker: a real error.
        raise
      restarts += 1


def _train(job: FederatedJob, config, output_dir: str, restarts: int,
           death: Optional[tff_runtime.WorkerDeath]) -> Dict[str, Any]:
  """Starts a worker if none runs, resumes from the latest checkpoint, trains,
  reports; `restarts` and `death` say how often and why it had to start over."""
  tff_runtime.ensure_execution_context()
  privacy = _privacy_of(job.dp, config.clients_per_round, len(job.clients.client_ids))
  process = job.build_process()
  calls = round_calls.RoundCalls(process, job.clients, config, job.client_shards,
                                 poisson=job.dp is not None)
  state_manager = checkpoints.AtomicFileProgramStateManager(
      os.path.join(output_dir, "checkpoints"), keep_total=3)
  initial_state = process.initialize()
  state, done_rounds = checkpoints.load_latest_readable(state_manager, initial_state)
  if state is None:
    state = initial_state
    asyncio.run(state_manager.save(state, 0))
  if death is not None:
    print(f"{job.name}: the TFF worker (pid {death.pid}) died ({death.describe()}); "
          f"restart {restarts} of {tff_runtime.max_worker_restarts()}: a new worker "
          f"resumes from round {done_rounds}", file=sys.stderr, flush=True)
  metrics_csv = tff.program.CSVFileReleaseManager(
      os.path.join(output_dir, "metrics.csv"), key_fieldname="round")
  tensorboard = tff.program.TensorBoardReleaseManager(
      os.path.join(output_dir, "tensorboard"))
  server_model = job.build_server_model()

  num_clients = len(job.clients.client_ids)
  cap, minimum = config.round_budget(num_clients)
  metrics_path = os.path.join(output_dir, "metrics.csv")
  examples_seen = _examples_through(metrics_path, done_rounds)
  curve = validation_curve.ValidationCurve(
      config.stopping_rule(), output_dir,
      validation_curve.read_curve(metrics_path, "val", job.monitored,
                                  lambda row: int(row["round"]), done_rounds),
      min_step=minimum)
  trained_rounds = done_rounds
  lines = progress.ProgressLines(job.name, "round", cap, done_rounds,
                                 may_stop_early=bool(curve.rule.patience))
  if death is None:
    lines.say(run_directory.starting_line(output_dir, done_rounds, "round"))
  while trained_rounds < cap and not curve.should_stop(trained_rounds):
    round_num = trained_rounds + 1
    state, metrics = calls.next(state, round_num)
    row = {**_training_metrics(metrics), **job.round_metrics, **privacy(round_num)}
    examples_seen += int(row["train_num_examples"])
    row["examples_seen"] = examples_seen
    if round_num % config.eval_every == 0 or round_num == cap:
      fedavg.assign_weights(process, state, server_model)
      row.update({f"val_{k}": v for k, v in curve.record(
          round_num, job.evaluate(server_model, "validation"), job.monitored,
          server_model).items()})
    asyncio.run(metrics_csv.release(row, key=round_num))
    asyncio.run(tensorboard.release(row, key=round_num))
    if (round_num % config.checkpoint_every == 0 or round_num == cap or
        curve.should_stop(round_num)):
      asyncio.run(state_manager.save(state, round_num))
    lines.report(round_num, f"loss {row['train_loss']:.4f}, val {job.monitored} " +
                 ("-" if curve.latest is None else f"{curve.latest:.4f}"))
    trained_rounds = round_num
  if curve.rule.patience:  # Converged: the best evaluated model.
    best_round = curve.restore_best(server_model)
  else:  # A fixed budget: the model after it.
    best_round = trained_rounds
    fedavg.assign_weights(process, state, server_model)
  server_model.save_weights(os.path.join(output_dir, CHECKPOINT))
  job.export(server_model, os.path.join(output_dir, "export"))
  results = {
      **job.results,
      "rounds": trained_rounds,
      "best_round": best_round,
      "passes": config.passes(trained_rounds, num_clients),
      "best_passes": config.passes(best_round, num_clients),
      "clients_per_round": config.clients_per_round,
      "examples_seen": examples_seen,
      "worker_restarts": restarts,
      **job.round_metrics,
      **privacy(best_round),  # The reported model's: it saw best_round rounds.
      "test": validation_curve.test_metrics(job.evaluate(server_model, "test"),
                                            job.monitored, output_dir),
      **job.baselines(),
  }
  run_directory.write_json(os.path.join(output_dir, run_directory.RESULTS), results)
  lines.say(run_directory.finished_line(output_dir, trained_rounds, best_round, "round"))
  return results
