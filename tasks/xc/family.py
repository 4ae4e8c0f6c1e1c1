"""The XC family: FedAwS, FedSS and their baselines against centralized references.

A federated run is one algorithm (FedAwS's fedaws, positive_only,
fixed_class_embeddings, softmax_oracle; FedSS's fedss, neg_only, pos_only,
full_softmax) on the task's clients, watched on validation precision@1
(MAP@R when the test classes are disjoint from the training classes); its
metrics carry the bytes each client moves per round. The centralized
references are the same tower and class table trained with full softmax on
the pooled examples of one drawn label a point (`centralized_one_label`, what
FedAwS's clients hold) and of all labels (`centralized_all_labels`, one
example a point with its labels as a soft target); a comparison also trains
the all-labels reference with each stronger tower asked for
(`reference_architectures`, the residual one by default), since the tower
that trains best federatedly is not the best centralized model on every set.
The trivial baseline predicts the labels most frequent among all training
labels.
"""

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from fed_retrieval import export
from fed_retrieval import top_k_index
from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms import sub_model
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.evaluation import classification_metrics
from fed_retrieval.evaluation import units
from fed_retrieval.models import xc_encoder
from fed_retrieval.training import federated_loop
from fed_retrieval.training.centralized_loop import CentralizedJob
from losses import multi_label
from tasks import family
from tasks.xc import flags as xc_flags
from tasks.xc import xc_task
from tasks.xc.settings import ARCHITECTURES
from tasks.xc.settings import XCSettings
from tasks.xc.xc_task import XCTask

# The comparison's row name of each centralized reference, by label assignment.
CENTRALIZED_SETTINGS = {"sample": "centralized_one_label",
                        "all": "centralized_all_labels"}
BASELINE = "most_frequent_labels"
CALIBRATION_POINTS = 1000  # Training points an approximate index is calibrated on.


def model_config_for(task: XCTask, settings: XCSettings) -> xc_encoder.XCEncoderConfig:
  return xc_encoder.XCEncoderConfig(task.num_features, task.num_labels,
                                    logit_scale=settings.logit_scale,
                                    scoring=settings.scoring,
                                    **ARCHITECTURES[settings.architecture])


def algorithm_config(task: XCTask, settings: XCSettings, algorithm: str
                     ) -> Union[FedAwSConfig, FedSSConfig]:
  """The settings of `algorithm`, sized to the task's clients."""
  if algorithm == fedaws.ORACLE:  # FedSS's full softmax at FedAwS's rates.
    rates = {name: getattr(settings.fedaws, name) for name in (
        "client_learning_rate", "server_optimizer", "server_learning_rate")}
    return algorithm_config(task, dataclasses.replace(
        settings, fedss=dataclasses.replace(settings.fedss, **rates)), "full_softmax")
  if algorithm in fedss.ALGORITHMS:
    return dataclasses.replace(
        settings.fedss, algorithm=algorithm,
        positives_per_client=task.max_labels_per_client()).for_classes(task.num_labels)
  return dataclasses.replace(settings.fedaws, algorithm=algorithm,
                             rows_per_client=task.max_labels_per_client())


def client_bytes(model_config: xc_encoder.XCEncoderConfig,
                 algorithm: Union[FedAwSConfig, FedSSConfig], bag: str,
                 bag_rows: Optional[float] = None, labels: Optional[float] = None
                 ) -> Tuple[float, float]:
  """(down, up) bytes of a client that reads `bag_rows` bag rows (a selected
  bag) and holds `labels` labels; None: the key set's padded size."""
  bag_rows = bag_rows if bag == "selected" else None
  if isinstance(algorithm, FedSSConfig):
    return fedss.bytes_per_client(model_config.weight_shapes(), model_config.num_labels,
                                  model_config.embedding_dim, algorithm, bag_rows, labels)
  return fedaws.bytes_per_client(model_config, algorithm, bag_rows, labels)


def build_process(task: XCTask, model_config: xc_encoder.XCEncoderConfig,
                  settings: XCSettings, algorithm: str) -> sub_model.Process:
  """The process of `algorithm` on the task's clients."""
  config = algorithm_config(task, settings, algorithm)
  dp = (None if settings.dp is None else
        differential_privacy.ClientDP(settings.dp, settings.loop.clients_per_round))
  sharded = fedavg.shards_of(settings.loop, settings.dp) > 0
  build = (fedss.build_xc_process if isinstance(config, FedSSConfig)
           else fedaws.build_fedaws_process)
  labels = task.clients.labels
  return build(model_config, config, task.feature_width, settings.loop.seed,
               settings.bag, dp, sharded,
               other_labels=labels.shape[1] - 1 if labels.ndim == 2 else 0)


def round_bytes(task: XCTask, model_config: xc_encoder.XCEncoderConfig,
                settings: XCSettings, algorithm: str) -> Dict[str, float]:
  """Bytes per client per round: the simulation's (the largest client's bag
  and the padded key set) and the mean a deployment would move (each client's
  own bag rows and real labels)."""
  config = algorithm_config(task, settings, algorithm)
  bag_rows = task.bag_rows_per_client()
  labels = task.labels_per_client()
  down, up = client_bytes(model_config, config, settings.bag, float(bag_rows.max()))
  real = [client_bytes(model_config, config, settings.bag, float(b), float(n))
          for b, n in zip(bag_rows, labels)]
  return {"bytes_down_per_client": int(down), "bytes_up_per_client": int(up),
          "mean_real_bytes_down_per_client": float(np.mean([d for d, _ in real])),
          "mean_real_bytes_up_per_client": float(np.mean([u for _, u in real]))}


def _evaluation_config(task: XCTask, settings: XCSettings) -> Dict[str, Any]:
  """The run config's part for an evaluation that is not the exact one (none
  for brute force: a run's directory is the same as before indexes existed)."""
  kind = top_k_index.resolve_kind(settings.index, task.num_labels)
  return {} if kind == "brute_force" else {"evaluation": {
      "index": kind, "index_recall": settings.index_recall}}


def evaluation(task: XCTask, index: str = top_k_index.AUTO,
               target_recall: float = top_k_index.TARGET_RECALL
               ) -> Callable[[tf.keras.Model, str], Dict[str, Any]]:
  """evaluate(model, split): P@k over every class (the top k found by `index`,
  an approximate one calibrated on the first 1,000 training points) with the
  class table's cosines (over all classes, and within each client's), or
  MAP@R among unseen classes when the test classes are held out of training."""
  splits = {"validation": task.validation, "test": task.test}
  if task.config.class_split == "disjoint":
    return lambda model, split: classification_metrics.evaluate_retrieval(
        model, splits[split])
  calibration = task.train.subset(np.arange(min(CALIBRATION_POINTS, len(task.train))))
  # Clients of two or more classes, found once rather than at every evaluation.
  groups = [labels for labels in task.client_label_sets() if len(labels) > 1]
  return lambda model, split: classification_metrics.evaluate_classifier(
      model, splits[split], index=index, calibration_points=calibration,
      target_recall=target_recall, class_groups=groups)


def most_frequent_labels_baseline(task: XCTask,
                                   ks: Sequence[int] = classification_metrics.DEFAULT_KS
                                   ) -> Dict[str, float]:
  """P@k of predicting, for every test point, the labels most frequent among
  all labels of the training points (not only the ones the clients keep)."""
  counts = np.bincount(np.concatenate(task.train.label_sets), minlength=task.num_labels)
  top = np.argsort(-counts, kind="stable")[:max(ks)]
  return units.with_standard_error(classification_metrics.precision_recall_at_k(
      np.tile(top, (len(task.test), 1)), task.test.label_sets, ks), "precision@1")


def _baselines(task: XCTask) -> Callable[[], Dict[str, Any]]:
  """The trivial baseline results.json carries: the most frequent labels (P@k);
  none where the test classes are unseen in training (no frequencies)."""
  if task.config.class_split != "points":
    return dict
  return lambda: {"most_frequent_labels_baseline": most_frequent_labels_baseline(task)}


def _export(model_config: xc_encoder.XCEncoderConfig):
  return lambda model, directory: export.export_xc_classifier(model, model_config,
                                                              directory)


def _headline(task_config: xc_task.XCTaskConfig) -> str:
  return "map@r" if task_config.class_split == "disjoint" else "precision@1"


def federated_job(task: XCTask, settings: XCSettings, algorithm: str
                  ) -> federated_loop.FederatedJob:
  """`algorithm` on the XC task's clients; exports the classifier."""
  settings.check(algorithm)
  model_config = model_config_for(task, settings)
  return federated_loop.FederatedJob(
      name=f"federated {algorithm}",
      run_config={"task": task.config.describe(),
                  "task_fingerprint": xc_task.fingerprint(task),
                  "model": dataclasses.asdict(model_config),
                  "training": {"algorithm": dataclasses.asdict(
                      algorithm_config(task, settings, algorithm)),
                               "bag": settings.bag, "dp": settings.dp,
                               "loop": settings.loop},
                  **_evaluation_config(task, settings)},
      build_process=lambda: build_process(task, model_config, settings, algorithm),
      clients=task.clients,
      build_server_model=lambda: xc_encoder.build_xc_classifier(model_config,
                                                                settings.loop.seed),
      evaluate=evaluation(task, settings.index, settings.index_recall), monitored=_headline(task.config),
      export=_export(model_config),
      results={"algorithm": algorithm, "task": task.summary(),
               "partition": task.config.partition},
      baselines=_baselines(task),
      round_metrics=round_bytes(task, model_config, settings, algorithm),
      client_shards=fedavg.shards_of(settings.loop, settings.dp), dp=settings.dp,
      central=federated_loop.CentralModel(
          lambda: xc_encoder.build_xc_classifier(model_config, settings.loop.seed),
          _own_label_crossentropy(task)))


def _own_label_crossentropy(task: XCTask):
  """Softmax cross-entropy of each client example's own label (the first
  column where the clients' labels carry their other held labels)."""
  crossentropy = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)
  if task.clients.labels.ndim == 1:
    return crossentropy
  return lambda labels, logits: crossentropy(labels[:, 0], logits)


def reference_examples(task: XCTask, label_assignment: str
                       ) -> Tuple[np.ndarray, np.ndarray, tf.keras.losses.Loss]:
  """(point rows, targets, loss) a centralized reference trains on: one drawn
  label a point (`sample`) with softmax cross-entropy, or every label of a
  point as one soft target (`all`, `multi_label`): a pass is a pass over the
  points however many labels they carry."""
  if label_assignment == "all":
    return (np.arange(len(task.train)), multi_label.padded_label_sets(
        task.train.label_sets), multi_label.SoftTargetCrossentropy())
  points, labels = task.training_examples("sample")
  return (points, labels.astype(np.int32),
          tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def reference_name(label_assignment: str, architecture: Optional[str] = None) -> str:
  """A centralized reference's row: by its label assignment, and its tower
  where that is not the federated runs'."""
  name = CENTRALIZED_SETTINGS[label_assignment]
  return f"{name}_{architecture}" if architecture else name


def centralized_job(task: XCTask, settings: XCSettings, label_assignment: str,
                    name: Optional[str] = None) -> CentralizedJob:
  """The tower and class table of `settings` (the federated runs' unless a
  comparison asks for another) trained centrally with full softmax on the
  examples of `label_assignment`; exported likewise. Its run config holds
  what its result depends on: the points and splits (not how clients are
  dealt), its examples, the model and its training."""
  if label_assignment not in xc_task.LABEL_ASSIGNMENTS:
    raise ValueError(f"label assignment must be one of "
                     f"{', '.join(xc_task.LABEL_ASSIGNMENTS)}, got '{label_assignment}'")
  model_config = model_config_for(task, settings)
  points, targets, loss = reference_examples(task, label_assignment)
  inputs = (task.train.feature_ids[points], task.train.feature_values[points])
  setting = name or reference_name(label_assignment)
  return CentralizedJob(
      name=setting,
      run_config={"task": task.config.describe_points(),
                  "task_fingerprint": xc_task.fingerprint(task, points, targets),
                  "model": dataclasses.asdict(model_config),
                  "training": {"label_assignment": label_assignment,
                               "centralized": settings.centralized},
                  **_evaluation_config(task, settings)},
      build_model=lambda: xc_encoder.build_xc_classifier(model_config,
                                                         settings.loop.seed),
      loss=loss, train_arrays=lambda: (inputs, targets), num_examples=len(points),
      evaluate=evaluation(task, settings.index, settings.index_recall), monitored=_headline(task.config),
      export=_export(model_config),
      results={"algorithm": setting, "label_assignment": label_assignment,
               "task": task.summary()},
      baselines=_baselines(task))


class XCFamily(family.TaskFamily):
  """Extreme classification from label-partitioned clients (papers 000, 003)."""
  name = "xc"
  relative_gaps = False
  help_groups = xc_flags.HELP_GROUPS

  def columns(self, settings: XCSettings) -> List[Tuple[str, str]]:
    if settings.task.class_split == "disjoint":
      return [("map@r", "MAP@R"), ("recall@1", "R@1")]
    columns = [("precision@1", "P@1"), ("precision@3", "P@3"), ("precision@5", "P@5"),
               ("class_cosine", "class cosine")]
    if settings.task.partition != "one_label_per_client":
      columns.append(("client_class_cosine", "client class cosine"))
    if settings.index == "approximate":  # P@k through the index: its recall beside.
      columns.append(("index_recall@5", "index recall@5"))
    return columns

  def headline(self, settings: XCSettings) -> str:
    return _headline(settings.task)

  def settings_from_flags(self) -> XCSettings:
    return xc_flags.settings_from_flags()

  def federated_run(self, settings: XCSettings, algorithm: Optional[str] = None,
                    task: Optional[XCTask] = None) -> family.FederatedRun:
    algorithm = algorithm or settings.algorithm
    settings.check(algorithm)
    task = task or xc_task.build_xc_task(settings.task)
    settings = dataclasses.replace(
        settings, loop=settings.loop.for_clients(len(task.clients.client_ids)))
    return family.FederatedRun(
        algorithm, lambda: federated_job(task, settings, algorithm), settings.loop,
        CENTRALIZED_SETTINGS[settings.task.label_assignment])

  def centralized_run(self, settings: XCSettings, label_assignment: Optional[str] = None,
                      task: Optional[XCTask] = None, architecture: Optional[str] = None
                      ) -> family.CentralizedRun:
    """A reference of `settings`' tower, or of `architecture` (named by it)."""
    assignment = label_assignment or settings.task.label_assignment
    task = task or xc_task.build_xc_task(settings.task)
    name = reference_name(assignment, architecture)
    if architecture:
      settings = dataclasses.replace(settings, architecture=architecture)
    return family.CentralizedRun(
        name, lambda: centralized_job(task, settings, assignment, name),
        settings.centralized)

  def comparison(self, settings: XCSettings) -> List[family.Group]:
    """The algorithms beside both references (none where the test classes are
    held out of training: no softmax over them), the all-labels reference of
    each other tower asked for, and the most frequent labels."""
    task = xc_task.build_xc_task(settings.task)
    points = settings.task.class_split == "points"
    references = xc_task.LABEL_ASSIGNMENTS if settings.references and points else ()
    centralized = [self.centralized_run(settings, a, task) for a in references]
    if references:
      centralized += [self.centralized_run(settings, "all", task, tower)
                      for tower in settings.reference_architectures
                      if tower != settings.architecture]
    return [family.Group(
        "", [self.federated_run(settings, a, task) for a in settings.algorithms],
        centralized,
        BASELINE if points else None,
        (lambda: most_frequent_labels_baseline(task)) if points else None)]
