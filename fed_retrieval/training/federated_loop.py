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
`validation_curve`), but not before `min_passes` expected visits per client,
or at its cap (`rounds`, or `max_passes` visits); it reports and exports the
model of the best evaluation. With `patience` 0 it trains the whole cap and
reports the final model.

A TFF call trains the rounds up to the next evaluation or checkpoint
(`round_calls.RoundCalls`): a fifth of the calls by default, the same rounds.

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
import math
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval import export
from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import sub_model
from fed_retrieval.evaluation import recall_metrics
from fed_retrieval.evaluation import retrieval_evaluation
from fed_retrieval.models import dual_encoder
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.runtime import worker_threads
from fed_retrieval.training import centralized_loop
from fed_retrieval.training import checkpoints
from fed_retrieval.training import client_sampling
from fed_retrieval.training import early_stopping
from fed_retrieval.training import progress
from fed_retrieval.training import round_calls
from fed_retrieval.training import run_directory
from fed_retrieval.training import validation_curve
from losses import registry
from tasks import client_data
from tasks.movielens.movielens_task import MovieLensTask



# Client SGD learning rates by loss family (README, "Real MovieLens"): the
# softmax losses' gradients are 1/T = 20 times the hinge's (cosine scale).
# H+S with its negative term: 4.0 beats 1, 2 and 8 on ml-latest-small and 1
# on ml1m.
SOFTMAX_CLIENT_LEARNING_RATE = 0.1
HINGE_CLIENT_LEARNING_RATE = 4.0
# Server Adam's epsilon (TFF's default 1e-7): with it, an item row whose
# averaged update is tiny and noisy (a rare item, moved only through global
# softmax's denominator) still takes a full-rate step. On ml-latest-small,
# seeds 0-2, federated global softmax's test recall@10 rose from 5.11% to
# 5.30% on average, H+S's stayed level (README, "Real MovieLens").
SERVER_EPSILON = 1e-4


def default_client_learning_rate(loss: str) -> float:
  """The client learning rate of `loss` when none is given."""
  return (HINGE_CLIENT_LEARNING_RATE if registry.base_loss_name(loss) == "hinge"
          else SOFTMAX_CLIENT_LEARNING_RATE)


@dataclasses.dataclass(frozen=True)
class FederatedConfig:
  """How the federated model is trained (names follow the script flags).

  The defaults are FedAdam: client SGD (`client_learning_rate` None: the loss
  family's, `default_client_learning_rate`) and server Adam at 0.05 with
  epsilon `SERVER_EPSILON`, each
  client capped at 20 batches a round. Plain FedAvg (server SGD at 1.0) learns
  the hinge loss far more slowly, because its cosine-scale gradients are
  ~1/T = 20 times smaller than the softmax losses', and Adam on the server
  normalizes that away. The cap, client SGD 0.1 for the softmax losses and the
  server rate were chosen on ml-latest-small, where heavy users' local epochs
  drifted the average, and checked on `ml1m` (README). The budget is in
  passes (expected visits per client): at least `min_passes`, at most
  `max_passes` (or `rounds` rounds when given); in between, a run stops once
  10 evaluations (50 rounds) have not improved validation recall beyond its
  standard error.
  """
  objective: registry.ObjectiveConfig = registry.ObjectiveConfig()
  algorithm: str = "fedavg"
  rounds: Optional[int] = None  # The cap in rounds; None: `max_passes`.
  max_passes: float = 60.0
  min_passes: float = 1.0
  clients_per_round: int = 100
  local_epochs: int = 1
  max_local_steps: Optional[int] = 20
  client_sampling: Optional[str] = None  # None: uniform (runs made before it).
  client_shards: int = worker_threads.DEFAULT_CLIENT_SHARDS
  batch_size: int = 16
  client_optimizer: str = "sgd"
  client_learning_rate: Optional[float] = None
  # Each client batch's step compiled with XLA (shards only). Off: with the
  # full batches on static shapes, XLA no longer paid for global softmax
  # either (README, Throughput).
  client_jit_compile: bool = False
  server_optimizer: str = "adam"
  server_learning_rate: float = 0.05
  server_learning_rate_half_life: float = 0.0  # Rounds; 0: a constant rate.
  server_epsilon: Optional[float] = SERVER_EPSILON
  dp: Optional[differential_privacy.DPConfig] = None  # Client-level DP.
  eval_every: int = 5
  checkpoint_every: int = 5
  # 10 evaluations (50 rounds): federated H+S on ml-latest-small keeps
  # rising for 100+ rounds in steps that the noise of 61 validation users
  # hides for up to 45 rounds; 4 stopped two of three seeds at round 85, 0.4-0.7
  # points of test recall@10 below 200 rounds (README, "Real MovieLens").
  patience: int = 10
  min_improvement_se: float = 1.0
  smoothing: int = 1
  seed: int = 0
  ks: Tuple[int, ...] = (1, 5, 10)

  def __post_init__(self):
    if self.algorithm not in fedavg.ALGORITHMS:
      raise ValueError(f"--algorithm must be one of {', '.join(fedavg.ALGORITHMS)}, "
                       f"got '{self.algorithm}'")
    check_loop_settings(self)
    differential_privacy.check_compatible(self, self.dp)

  def resolved(self) -> "FederatedConfig":
    """This config with its client learning rate set (the loss's default
    where unset): what a run records and trains with."""
    return dataclasses.replace(
        self,
        client_learning_rate=(default_client_learning_rate(self.objective.loss)
                              if self.client_learning_rate is None
                              else self.client_learning_rate))


def check_loop_settings(config) -> None:
  """Validates the settings `run_federated` reads from any run config."""
  for name in ("rounds", "clients_per_round", "local_epochs", "batch_size",
               "eval_every", "checkpoint_every"):
    if getattr(config, name) is not None and getattr(config, name) < 1:
      raise ValueError(f"--{name} must be >= 1, got {getattr(config, name)}")
  check_passes(config)
  if config.client_shards < 0:
    raise ValueError(f"--client_shards must be >= 0, got {config.client_shards}")
  if getattr(config, "client_jit_compile", None) and not fedavg.shards_of(config):
    raise ValueError("--client_jit_compile: only shards of clients compile their step "
                     "(TFF's own client work does not); use --client_shards > 0"
                     + (" (a DP run trains one TFF client per client)"
                        if config.dp is not None else ""))
  if getattr(config, "server_learning_rate_half_life", 0) < 0:
    raise ValueError("--server_learning_rate_half_life must be >= 0 (0: a constant "
                     f"rate), got {config.server_learning_rate_half_life}")
  if config.max_local_steps is not None and config.max_local_steps < 1:
    raise ValueError(f"--max_local_steps must be >= 1, got {config.max_local_steps}")
  client_sampling.check_client_sampling(config.client_sampling)
  stopping_rule(config)


def check_passes(config) -> None:
  """Validates a config's budget in passes (`min_passes` <= `max_passes`)."""
  if not config.max_passes > 0:
    raise ValueError(f"--max_passes must be > 0, got {config.max_passes}")
  if not 0 <= config.min_passes <= config.max_passes:
    raise ValueError(f"--min_passes must be in [0, --max_passes={config.max_passes}], "
                     f"got {config.min_passes}")


def stopping_rule(config) -> early_stopping.StoppingRule:
  """The stopping rule of a run config (patience, min_improvement_se, smoothing)."""
  return early_stopping.StoppingRule.from_flags(config.patience,
                                                config.min_improvement_se,
                                                config.smoothing)


def round_budget(config, num_clients: int) -> Tuple[int, int]:
  """(cap, minimum) in rounds for `num_clients` clients: `rounds` when given,
  else `max_passes` expected visits per client (a round visits
  `clients_per_round` of them); the stopping rule may end a run only after
  `min_passes` visits."""
  rounds_per_pass = num_clients / min(config.clients_per_round, num_clients)
  cap = (config.rounds if config.rounds is not None
         else max(1, math.ceil(config.max_passes * rounds_per_pass)))
  return cap, min(cap, math.ceil(config.min_passes * rounds_per_pass))


def passes(rounds: int, clients_per_round: int, num_clients: int) -> float:
  """Expected visits per client after `rounds` rounds: the federated passes."""
  return rounds * min(clients_per_round, num_clients) / num_clients


def _examples_through(metrics_path: str, round_num: int) -> int:
  """The examples trained on through `round_num`, from the metrics."""
  if round_num == 0:
    return 0
  with open(metrics_path) as f:
    for row in csv.DictReader(f):
      if int(row["round"]) == round_num:
        return int(float(row["examples_seen"]))
  raise ValueError(f"{metrics_path}: no row for checkpointed round {round_num}")


def _privacy_of(config, num_clients: int) -> Callable[[int], Dict[str, float]]:
  """round -> {epsilon, target_delta} after that many rounds of a DP run
  ({} without DP)."""
  dp = getattr(config, "dp", None)  # XC run configs have none.
  if dp is None:
    return lambda round_num: {}
  probability = min(1.0, config.clients_per_round / num_clients)
  return lambda round_num: {
      "epsilon": differential_privacy.epsilon(dp, probability, round_num),
      "target_delta": dp.target_delta}


def _training_metrics(output_metrics) -> Dict[str, float]:
  train = output_metrics["client_work"]["train"]
  return {f"train_{recall_metrics.report_name(name)}": float(value)
          for name, value in train.items()}


def setting_name(task: MovieLensTask, config: FederatedConfig) -> str:
  """'federated', or the control it is: 'federated_shuffled' (IID data),
  'federated_sgd' (FedSGD)."""
  return "_".join(["federated"] +
                  (["shuffled"] if task.config.shuffle_across_users else []) +
                  (["sgd"] if config.algorithm == "fedsgd" else []))


def model_config_for(task: MovieLensTask, config: FederatedConfig,
                     embedding_dim: int) -> dual_encoder.DualEncoderConfig:
  return centralized_loop.model_config_for(task, config.objective.build(),
                                               embedding_dim)


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
  # Whether TFF can split a round's clients across several workers: not for a
  # sub-model process whose server answers each client with rows of its own
  # (measured: TFF's mergeable context delivered them to other clients).
  splits_across_workers: bool = True
  # The shard datasets `next` takes (`fedavg.shards_of`); 0: one per client.
  client_shards: int = 0


def run_federated(job: FederatedJob, config, output_dir: str) -> Dict[str, Any]:
  """Trains (or resumes, or returns the finished run's results) and exports.

  `config` gives the loop's settings: rounds or max_passes, min_passes,
  clients_per_round, client_sampling, local_epochs, max_local_steps,
  batch_size, eval_every, checkpoint_every, patience, min_improvement_se,
  smoothing and seed.
  """
  if tff_runtime.using_remote_workers() and not job.splits_across_workers:
    raise ValueError(f"--workers: {job.name} runs on one worker (drop --workers): its "
                     "server answers each client with rows of its own, which TFF "
                     "cannot keep aligned with the clients' data across workers")
  finished = run_directory.open_run(output_dir, job.run_config, job.write_files)
  if finished is not None:
    return finished
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
  privacy = _privacy_of(config, len(job.clients.client_ids))
  process = job.build_process()
  calls = round_calls.RoundCalls(process, job.clients, config, job.client_shards)
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
  cap, minimum = round_budget(config, num_clients)
  metrics_path = os.path.join(output_dir, "metrics.csv")
  examples_seen = _examples_through(metrics_path, done_rounds)
  curve = validation_curve.ValidationCurve(
      stopping_rule(config), output_dir,
      validation_curve.read_curve(metrics_path, "val", job.monitored,
                                  lambda row: int(row["round"]), done_rounds),
      min_step=minimum)
  trained_rounds = done_rounds
  lines = progress.ProgressLines(job.name, "round", cap, done_rounds,
                                 may_stop_early=bool(curve.rule.patience))
  if death is None:
    lines.say(run_directory.starting_line(output_dir, done_rounds, "round"))
  # A call trains the rounds up to the next evaluation or checkpoint
  # (`round_calls`): the state is here at every round that needs it.
  while trained_rounds < cap and not curve.should_stop(trained_rounds):
    state, call_metrics = calls.next(state, trained_rounds + 1, cap)
    for round_num, metrics in enumerate(call_metrics, trained_rounds + 1):
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
    trained_rounds += len(call_metrics)
  if curve.rule.patience:  # Converged: the best evaluated model.
    best_round = curve.restore_best(server_model)
  else:  # A fixed budget: the model after it.
    best_round = trained_rounds
    fedavg.assign_weights(process, state, server_model)
  server_model.save_weights(os.path.join(output_dir, centralized_loop.CHECKPOINT))
  job.export(server_model, os.path.join(output_dir, "export"))
  results = {
      **job.results,
      "rounds": trained_rounds,
      "best_round": best_round,
      "passes": passes(trained_rounds, config.clients_per_round, num_clients),
      "best_passes": passes(best_round, config.clients_per_round, num_clients),
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


def movielens_job_parts(task: MovieLensTask,
                        model_config: dual_encoder.DualEncoderConfig,
                        config: FederatedConfig,
                        positives_as_input: bool = False) -> Dict[str, Any]:
  """The `FederatedJob` fields every MovieLens algorithm shares: the users as
  clients (their batches with the positives as a model input too, for a
  model that scores the batch's positives), the dual encoder, recall on the
  validation / test users, export, the item ids written beside the run, and
  the round's shards of clients."""
  task.require_splits("federated_train", "federated_val", "federated_test")
  splits = {"validation": task.federated_val, "test": task.federated_test}
  return dict(
      clients=client_data.ClientDatasets.from_examples(task.federated_train,
                                                       positives_as_input),
      build_server_model=lambda: dual_encoder.build_dual_encoder(model_config),
      evaluate=lambda model, split: retrieval_evaluation.evaluate(
          model, splits[split], config.ks, config.batch_size),
      monitored=f"global_recall@{max(config.ks)}",
      export=lambda model, directory: export.export_model(
          model, model_config, task.items, directory),
      baselines=lambda: retrieval_evaluation.most_popular_baseline(
          task.federated_train, task.federated_test, task.vocabulary_size, config.ks,
          config.batch_size),
      write_files=task.items.save,
      client_shards=fedavg.shards_of(config))


def train_federated(task: MovieLensTask, config: FederatedConfig, output_dir: str,
                    embedding_dim: int = 16) -> Dict[str, Any]:
  """FedAvg or FedSGD of the dual encoder on a MovieLens task (`run_federated`)."""
  config = config.resolved()
  model_config = model_config_for(task, config, embedding_dim)
  setting = setting_name(task, config)
  job = FederatedJob(
      name=f"{setting} {config.objective.loss}",
      run_config={"setting": setting, "task": task.describe(),
                  "model": dataclasses.asdict(model_config),
                  "training": dataclasses.asdict(config)},
      build_process=lambda: fedavg.build_learning_process(
          fedavg.retrieval_model_fn(model_config, config.objective, seed=config.seed),
          config),
      **movielens_job_parts(task, model_config, config,
                            config.objective.build().candidates == "batch"),
      results={"setting": setting, "loss": config.objective.loss,
               "algorithm": config.algorithm},
      round_metrics=dict(zip(("bytes_down_per_client", "bytes_up_per_client"),
                             fedavg.bytes_per_client(model_config.weight_shapes()))))
  return run_federated(job, config, output_dir)
