"""The MovieLens family: the dual encoder trained federatedly and centrally.

Clients are users; a federated run is FedAvg or FedSGD of the dual encoder on
one loss, or FedSS's sampled global softmax (items as classes: a client
downloads only the rows of the items its examples touch and its sampled
negatives, `fedss.build_movielens_process`); its reference is the same loss
trained centrally on the pooled examples of the federated training users,
validated and tested on the same users. Runs are watched on validation
global recall@max(k) (per user: the unit of its standard error); the trivial
baseline recommends the most popular training items. A comparison's
controls: the IID `federated_shuffled` run (examples dealt to users at
random, counts kept), `federated_sgd` (one step a round) and client-level DP
runs `federated_dp<z>`, each read against the centralized run of its loss.
"""

import dataclasses
from typing import Any, Dict, List, Tuple

import numpy as np

from fed_retrieval import export
from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms import sub_model
from fed_retrieval.evaluation import retrieval_evaluation
from fed_retrieval.models import dual_encoder
from fed_retrieval.training import early_stopping
from fed_retrieval.training import federated_loop
from fed_retrieval.training.centralized_loop import CentralizedConfig
from fed_retrieval.training.centralized_loop import CentralizedJob
from fed_retrieval.training.loop_config import LOOP_DEFAULTS
from losses import registry
from tasks import client_data
from tasks import family
from tasks.movielens import flags as movielens_flags
from tasks.movielens import movielens_task
from tasks.movielens.movielens_task import MovieLensTask
from tasks.movielens.sequence_examples import Examples
from tasks.movielens.settings import MovieLensSettings

SAMPLED_LOSS = "global_softmax"  # What FedSS trains on MovieLens.
BASELINE = "most_popular"


def xla_by_default(objective: registry.Objective, optimizer: str) -> bool:
  """Whether a centralized batch step compiles with XLA unless told: for the
  objectives with spreadout, whose step also works on the whole item table
  (its Gram matrix; H+S's negatives against every item), which XLA fuses; and
  for global softmax under plain SGD, whose step then writes only the rows it
  touched (`chunked_steps`: in place), leaving the [B, V] softmax XLA fuses.
  Measured here with `chunked_steps`, batch 16, XLA / plain examples per
  second on ml-latest-small and synthetic ml1m: with Adam, BS + spreadout
  1.56 / 1.99, H+S 1.27 / 1.30, batch softmax 1.00 / 1.00, the hinge 0.88 /
  0.90, global softmax 0.39 / 0.36 (Adam's dense update of the whole table
  runs faster in TF's own kernels); with SGD, global softmax 1.3-1.4 /
  1.3-1.5, batch softmax 0.46 / 0.6, the hinge 0.6."""
  return objective.spreadout.any or (
      registry.base_loss_name(objective.name) == "global_softmax" and optimizer == "sgd")


def model_config_for(task: MovieLensTask, objective: registry.Objective,
                     embedding_dim: int) -> dual_encoder.DualEncoderConfig:
  return dual_encoder.DualEncoderConfig(
      vocabulary_size=task.vocabulary_size,
      max_context_length=task.config.max_context_length,
      embedding_dim=embedding_dim, spreadout=objective.spreadout)


def _evaluation(examples: Dict[str, Examples], ks, batch_size: int):
  return lambda model, split: retrieval_evaluation.evaluate(model, examples[split], ks,
                                                            batch_size)


def _headline(ks) -> str:
  return f"global_recall@{max(ks)}"


def _job_parts(task: MovieLensTask, model_config: dual_encoder.DualEncoderConfig,
               settings: MovieLensSettings, train: Examples,
               splits: Dict[str, Examples]) -> Dict[str, Any]:
  """The job fields every MovieLens run shares: recall on the validation and
  test splits, export of the query tower and item index, the item ids
  written beside the run, the most-popular baseline."""
  return dict(
      evaluate=_evaluation(splits, settings.ks, settings.loop.batch_size),
      monitored=_headline(settings.ks),
      export=lambda model, directory: export.export_model(
          model, model_config, task.items, directory),
      baselines=lambda: retrieval_evaluation.most_popular_baseline(
          train, splits["test"], task.vocabulary_size, settings.ks,
          settings.loop.batch_size),
      write_files=task.items.save)


def _federated_splits(task: MovieLensTask) -> Dict[str, Examples]:
  task.require_splits("federated_train", "federated_val", "federated_test")
  return {"validation": task.federated_val, "test": task.federated_test}


def setting_name(task: MovieLensTask, fedavg_config: fedavg.FedAvgConfig) -> str:
  """'federated', or the control it is: 'federated_shuffled' (IID data),
  'federated_sgd' (FedSGD), 'federated_dp<z>' (client-level DP)."""
  return "_".join(["federated"] +
                  (["shuffled"] if task.config.shuffle_across_users else []) +
                  (["sgd"] if fedavg_config.algorithm == "fedsgd" else []) +
                  ([f"dp{fedavg_config.dp.noise_multiplier:g}"]
                   if fedavg_config.dp is not None else []))


def _federated_job(task: MovieLensTask, settings: MovieLensSettings,
                   model_config: dual_encoder.DualEncoderConfig, setting: str,
                   objective: registry.ObjectiveConfig, algorithm: Dict[str, Any],
                   positives_as_input: bool = False, **fields
                   ) -> federated_loop.FederatedJob:
  """A federated run of the dual encoder on the users: the fields every
  MovieLens algorithm shares, `algorithm` (its settings) in the run config."""
  return federated_loop.FederatedJob(
      name=f"{setting} {objective.loss}",
      run_config={"setting": setting, "task": task.describe(),
                  "model": dataclasses.asdict(model_config),
                  "training": {"objective": objective, **algorithm,
                               "loop": settings.loop, "ks": settings.ks}},
      clients=client_data.ClientDatasets.from_examples(task.federated_train,
                                                       positives_as_input),
      build_server_model=lambda: dual_encoder.build_dual_encoder(model_config),
      **_job_parts(task, model_config, settings, task.federated_train,
                   _federated_splits(task)), **fields)


def fedavg_job(task: MovieLensTask, settings: MovieLensSettings,
               objective: registry.ObjectiveConfig,
               fedavg_config: fedavg.FedAvgConfig) -> federated_loop.FederatedJob:
  """FedAvg or FedSGD of the dual encoder on `objective`, on its loss's loop."""
  settings = dataclasses.replace(settings, loop=settings.loop_for(objective.loss))
  built = objective.build()
  model_config = model_config_for(task, built, settings.embedding_dim)
  setting = setting_name(task, fedavg_config)
  return _federated_job(
      task, settings, model_config, setting, objective, {"fedavg": fedavg_config},
      built.candidates == "batch",
      build_process=lambda: fedavg.build_learning_process(
          fedavg.retrieval_model_fn(model_config, objective, seed=settings.loop.seed),
          fedavg_config, settings.loop),
      results={"setting": setting, "loss": objective.loss,
               "algorithm": fedavg_config.algorithm},
      round_metrics=dict(zip(("bytes_down_per_client", "bytes_up_per_client"),
                             fedavg.bytes_per_client(model_config.weight_shapes()))),
      client_shards=fedavg.shards_of(settings.loop, fedavg_config.dp),
      dp=fedavg_config.dp,
      central=federated_loop.CentralModel(
          lambda: dual_encoder.training_model(
              dual_encoder.build_dual_encoder(model_config, seed=0), built.candidates),
          built.loss, xla_by_default(built, "sgd")))


def distinct_items_per_user(examples: Examples) -> np.ndarray:
  """For each user, how many distinct items (not padding) its examples touch."""
  counts = []
  for start, stop in examples.user_ranges().values():
    items = np.unique(np.concatenate([examples.contexts[start:stop].ravel(),
                                      examples.labels[start:stop]]))
    counts.append(int(np.count_nonzero(items)))
  return np.asarray(counts)


def sampled_softmax_job(task: MovieLensTask, settings: MovieLensSettings,
                        algorithm: str) -> federated_loop.FederatedJob:
  """FedSS (sampled global softmax) or a baseline of it: the item table is the
  whole model, so a client needs only the rows of the items its examples
  touch plus its negatives. The key set has a fixed size in TFF, so every
  client's positive slots are the most distinct items any client touches; the
  metrics carry the bytes of that padded set and of the rows clients need on
  average (`mean_real_bytes_down_per_client`, what a deployment would send)."""
  objective = settings.objective.for_loss(SAMPLED_LOSS)
  model_config = model_config_for(task, objective.build(), settings.embedding_dim)
  touched = distinct_items_per_user(task.federated_train)
  vocabulary, dim = model_config.vocabulary_size, model_config.embedding_dim
  config = dataclasses.replace(settings.fedss, algorithm=algorithm,
                               positives_per_client=int(touched.max())
                               ).for_classes(vocabulary - 1)
  down, up = fedss.bytes_per_client([], vocabulary, dim, config)
  real_keys = (np.full(len(touched), vocabulary) if algorithm == "full_softmax"
               else touched + config.negatives)
  setting = f"federated_{algorithm}"
  return _federated_job(
      task, settings, model_config, setting, objective, {"algorithm": config},
      build_process=lambda: fedss.build_movielens_process(
          model_config, config, objective.temperature, settings.loop.seed,
          sharded=fedavg.shards_of(settings.loop) > 0),
      results={"setting": setting, "loss": SAMPLED_LOSS, "algorithm": algorithm},
      round_metrics={"bytes_down_per_client": down, "bytes_up_per_client": up,
                     "mean_real_bytes_down_per_client":
                         float(np.mean(real_keys)) * sub_model.FLOAT_BYTES * dim},
      client_shards=fedavg.shards_of(settings.loop))


def centralized_job(task: MovieLensTask, settings: MovieLensSettings,
                    objective: registry.ObjectiveConfig, config: CentralizedConfig,
                    split: str = "user") -> CentralizedJob:
  """The dual encoder trained centrally on `objective`: on the federated
  training users, validated and tested on the federated users (`split`
  "user"), or on the centralized 90/10 split of examples ("example": no
  validation users, the curve drawn on the test split)."""
  built = objective.build()
  model_config = model_config_for(task, built, settings.embedding_dim)
  positives_as_input = built.candidates == "batch"
  if split == "example":
    task.require_splits("centralized_train", "centralized_test")
    train = task.centralized_train
    splits = {"validation": task.centralized_test, "test": task.centralized_test}
  else:
    train, splits = task.federated_train, _federated_splits(task)
  return CentralizedJob(
      name=f"centralized {objective.loss}",
      run_config={"setting": "centralized", "task": task.describe(),
                  "model": dataclasses.asdict(model_config),
                  "training": {"objective": objective, "centralized": config,
                               "split": split, "ks": settings.ks}},
      build_model=lambda: dual_encoder.build_dual_encoder(model_config,
                                                          seed=config.seed),
      loss=built.loss,
      training_model=lambda model: dual_encoder.training_model(model, built.candidates),
      train_arrays=lambda: client_data.centralized_arrays(train, positives_as_input),
      num_examples=len(train),
      **_job_parts(task, model_config, settings, train, splits),
      results={"setting": "centralized", "loss": objective.loss},
      curve_split="val" if split == "user" else "test",
      jit_compile=xla_by_default(built, config.optimizer))


def federated_examples_per_round(task: MovieLensTask, settings: MovieLensSettings
                                 ) -> float:
  """The examples a federated round trains on, on average: its clients' local
  epochs, each client capped at `max_local_steps` batches."""
  loop = settings.loop.for_clients(task.federated_train.num_users)
  per_user = np.array([stop - start for start, stop in
                       task.federated_train.user_ranges().values()]) * loop.local_epochs
  if loop.max_local_steps is not None:
    per_user = np.minimum(per_user, loop.max_local_steps * loop.batch_size)
  return float(per_user.mean()) * min(loop.clients_per_round, per_user.size)


def with_federated_schedule(settings: MovieLensSettings, task: MovieLensTask
                            ) -> CentralizedConfig:
  """A comparison's centralized runs on the federated loop's clock, where not
  set: an evaluation every as many examples as `eval_every` federated rounds
  train on with the family's cap of a client's batches (so patience means as
  many examples in both settings; a cap is federated optimization, as the
  client rate is, and no run's own cap moves its reference), no stop
  before as many examples as the federated minimum in passes (the minimum in
  rounds is about server steps, which a centralized run has none of), a cap
  of as many examples as the federated cap, and the loop's stopping rule."""
  loop = settings.loop.for_clients(task.federated_train.num_users)
  centralized = settings.centralized
  per_round = federated_examples_per_round(task, dataclasses.replace(
      settings, loop=dataclasses.replace(
          settings.loop, max_local_steps=LOOP_DEFAULTS["movielens"].max_local_steps)))
  steps = lambda rounds: max(1, round(rounds * per_round / loop.batch_size))
  cap, minimum = dataclasses.replace(loop, min_rounds=0).round_budget(
      task.federated_train.num_users)
  changes = dict(batch_size=loop.batch_size, seed=loop.seed,
                 **early_stopping.stopping_fields(loop))
  if centralized.min_passes is None:
    changes["min_passes"] = minimum * per_round / len(task.federated_train)
  if centralized.eval_every_steps is None:
    changes["eval_every_steps"] = steps(loop.eval_every)
  if centralized.epochs is None and centralized.steps is None:
    changes["steps"] = steps(cap)
  return dataclasses.replace(centralized, **changes)


class MovieLensFamily(family.TaskFamily):
  """Next-item retrieval with a dual encoder, clients = users (paper 004)."""
  name = "movielens"
  relative_gaps = True
  help_groups = movielens_flags.HELP_GROUPS

  def columns(self, settings: MovieLensSettings) -> List[Tuple[str, str]]:
    return [(f"global_recall@{k}", f"recall@{k}") for k in sorted(settings.ks)]

  def headline(self, settings: MovieLensSettings) -> str:
    return _headline(settings.ks)

  def settings_from_flags(self) -> MovieLensSettings:
    return movielens_flags.settings_from_flags()

  def federated_run(self, settings: MovieLensSettings) -> family.FederatedRun:
    task = movielens_task.build_task(settings.task)
    settings = dataclasses.replace(settings, loop=settings.loop.for_clients(
        task.federated_train.num_users))
    if settings.algorithm in fedss.ALGORITHMS:
      job = lambda: sampled_softmax_job(task, settings, settings.algorithm)
      loss = SAMPLED_LOSS
    else:
      loss = settings.objective.loss
      job = lambda: fedavg_job(task, settings, settings.objective,
                               settings.fedavg_for(loss))
    return family.FederatedRun(settings.algorithm, job, settings.loop_for(loss),
                               f"centralized {loss}")

  def centralized_run(self, settings: MovieLensSettings) -> family.CentralizedRun:
    config = settings.centralized
    if config.patience and settings.split != "user":
      raise ValueError("--patience needs validation users: use --split_by=user")
    task = movielens_task.build_task(settings.task)
    if config.epochs is None and config.steps is None:
      config = dataclasses.replace(config, epochs=1)  # One pass unless told.
    return family.CentralizedRun(
        f"centralized {settings.objective.loss}",
        lambda: centralized_job(task, settings, settings.objective, config,
                                settings.split), config)

  def comparison(self, settings: MovieLensSettings) -> List[family.Group]:
    """Each loss federated (and its controls) beside it centrally; the FedSS
    runs beside centralized global softmax; the most popular items."""
    tasks: Dict[bool, MovieLensTask] = {}

    def task_of(shuffled: bool) -> MovieLensTask:
      if shuffled not in tasks:
        tasks[shuffled] = movielens_task.build_task(
            dataclasses.replace(settings.task, shuffle_across_users=shuffled))
      return tasks[shuffled]

    task = task_of(False)
    centralized_config = with_federated_schedule(settings, task)
    federated, centralized = [], []
    for loss in settings.losses:
      objective = settings.objective.for_loss(loss)
      reference = f"centralized {loss}"
      for shuffled, changes in self._controls(settings):
        fedavg_config = settings.fedavg_for(loss, **changes)
        run_task = task_of(shuffled)
        federated.append(family.FederatedRun(
            f"{setting_name(run_task, fedavg_config)} {loss}",
            lambda t=run_task, o=objective, c=fedavg_config: fedavg_job(t, settings, o, c),
            settings.loop_for(loss), reference))
      centralized.append(family.CentralizedRun(
          reference, lambda o=objective: centralized_job(task, settings, o,
                                                         centralized_config),
          centralized_config))
    for algorithm in settings.algorithms:
      federated.append(family.FederatedRun(
          f"federated_{algorithm} {SAMPLED_LOSS}",
          lambda a=algorithm: sampled_softmax_job(task, settings, a), settings.loop,
          f"centralized {SAMPLED_LOSS}"))
    return [family.Group("", federated, centralized, BASELINE,
                         lambda: retrieval_evaluation.most_popular_baseline(
                             task.federated_train, task.federated_test,
                             task.vocabulary_size, settings.ks,
                             settings.loop.batch_size)[f"{BASELINE}_baseline"])]

  @staticmethod
  def _controls(settings: MovieLensSettings) -> List[Tuple[bool, Dict[str, Any]]]:
    """(shuffled users?, FedAvg changes) of the federated run of each loss and
    of each control asked for."""
    controls = [(False, {})]
    if settings.include_shuffled:
      controls.append((True, {}))
    if settings.include_fedsgd:
      controls.append((False, {"algorithm": "fedsgd"}))
    controls += [(False, {"dp": dp}) for dp in settings.dp_runs]
    return controls
