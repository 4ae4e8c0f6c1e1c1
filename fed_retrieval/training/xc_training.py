"""Training the XC classifier: FedAwS, FedSS and their baselines federatedly,
and the centralized references they are read against.

Builds the `FederatedJob` of one algorithm (FedAwS's fedaws, positive_only,
fixed_class_embeddings, softmax_oracle; FedSS's fedss, neg_only, pos_only,
full_softmax) on an XC task and runs it with the
shared loop (`federated_loop.run_federated`): same sampling, checkpoints,
metrics, early stopping on validation precision@1 (MAP@R when the test
classes are disjoint from the training classes) and resume. The run's
metrics and results carry the bytes each client downloads and uploads per round.

The centralized reference (`train_xc_centralized`) is the same tower and
class table trained with full softmax on the pooled training examples of a
label assignment (`sample`: the one label a point keeps, as FedAwS's clients
hold it; `all`: every label of a point), with Keras `fit` and the same
stopping rule (`centralized_loop.run_centralized`).
"""

import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from fed_retrieval import export
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
from fed_retrieval.runtime import worker_threads
from fed_retrieval.training import centralized_loop
from fed_retrieval.training import early_stopping
from fed_retrieval.training import federated_loop
from losses import multi_label
from tasks.xc import xc_task
from tasks.xc.xc_task import XCTask

ALGORITHMS = fedaws.ALGORITHMS + fedss.ALGORITHMS
ARCHITECTURES = {
    "linear": xc_encoder.LINEAR_ARCHITECTURE,
    "residual": xc_encoder.RESIDUAL_ARCHITECTURE,
    "small": dict(bag_dim=64, hidden_dims=(128,), embedding_dim=64),
    "paper": xc_encoder.PAPER_ARCHITECTURE,
}


@dataclasses.dataclass(frozen=True)
class XCFederatedConfig:
  """An XC federated run: the algorithm, its family's settings, the model and
  the loop's settings."""
  algorithm: str = "fedaws"
  bag: str = "selected"
  fedaws: FedAwSConfig = FedAwSConfig()
  fedss: FedSSConfig = FedSSConfig()
  architecture: str = "linear"
  logit_scale: float = 10.0
  rounds: Optional[int] = None  # The cap in rounds; None: `max_passes`.
  max_passes: float = 100.0
  min_passes: float = 5.0
  clients_per_round: int = 100
  local_epochs: int = 1
  max_local_steps: Optional[int] = None
  client_sampling: Optional[str] = None  # None: uniform (runs made before it).
  batch_size: int = 16
  # Each round's clients in this many TFF client calls (0: one a client;
  # DP runs always one a client), each client still trained and answered
  # as its own (`sub_model`, `client_shards`).
  client_shards: int = worker_threads.DEFAULT_CLIENT_SHARDS
  eval_every: int = 5
  checkpoint_every: int = 5
  patience: int = 5
  min_improvement_se: float = 1.0
  smoothing: int = 1
  seed: int = 0
  ks: Tuple[int, ...] = classification_metrics.DEFAULT_KS
  # Client-level DP of the dense tower (the oracle's and full softmax's whole
  # model); the selected rows are not covered.
  dp: Optional[differential_privacy.DPConfig] = None

  def __post_init__(self):
    if self.algorithm not in ALGORITHMS:
      raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)} for the "
                       f"XC task, got '{self.algorithm}'")
    if self.architecture not in ARCHITECTURES:
      raise ValueError(f"--xc_architecture must be one of {', '.join(ARCHITECTURES)}, "
                       f"got '{self.architecture}'")
    fedaws.check_bag(self.bag)
    federated_loop.check_loop_settings(self)
    differential_privacy.check_compatible(self, self.dp)
    if (self.dp is not None and self.dp.clipping != "fixed" and
        self.algorithm != "softmax_oracle"):
      raise ValueError(f"--dp_clipping={self.dp.clipping}: --algorithm={self.algorithm} "
                       "clips at a fixed --clip_norm (adaptive: softmax_oracle only)")
    if (self.dp is not None and self.bag == "selected" and
        self.algorithm not in ("softmax_oracle", "full_softmax") and
        not ARCHITECTURES[self.architecture].get("dense_layers", True)):
      raise ValueError(f"--noise_multiplier: with --xc_architecture={self.architecture} "
                       "and --xc_bag=selected every weight a client updates is a selected "
                       "row, which DP does not cover; give --xc_bag=whole (the bag is "
                       "then dense and private) or a tower with dense layers")


def model_config_for(task: XCTask, config: XCFederatedConfig
                     ) -> xc_encoder.XCEncoderConfig:
  return xc_encoder.XCEncoderConfig(task.num_features, task.num_labels,
                                    logit_scale=config.logit_scale,
                                    **ARCHITECTURES[config.architecture])


def algorithm_config(task: XCTask, config: XCFederatedConfig
                     ) -> Union[FedAwSConfig, FedSSConfig]:
  """The settings of `config.algorithm`, sized to the task's clients."""
  if config.algorithm in fedss.ALGORITHMS:
    return dataclasses.replace(
        config.fedss, algorithm=config.algorithm,
        positives_per_client=task.max_labels_per_client()).for_classes(task.num_labels)
  return dataclasses.replace(config.fedaws, algorithm=config.algorithm,
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
                  config: XCFederatedConfig) -> sub_model.Process:
  """The process of `config.algorithm` on the task's clients."""
  algorithm = algorithm_config(task, config)
  dp = (None if config.dp is None else
        differential_privacy.ClientDP(config.dp, config.clients_per_round))
  sharded = fedavg.shards_of(config) > 0
  if isinstance(algorithm, FedSSConfig):
    return fedss.build_xc_process(model_config, algorithm, task.feature_width,
                                  config.seed, config.bag, dp, sharded)
  return fedaws.build_process(model_config, algorithm, task.feature_width, config.seed,
                              config.bag, dp, sharded)


def round_bytes(task: XCTask, model_config: xc_encoder.XCEncoderConfig,
                config: XCFederatedConfig) -> Dict[str, float]:
  """Bytes per client per round: the simulation's (the largest client's bag
  and the padded key set) and the mean a deployment would move (each client's
  own bag rows and real labels)."""
  algorithm = algorithm_config(task, config)
  bag_rows = task.bag_rows_per_client()
  labels = task.labels_per_client()
  down, up = client_bytes(model_config, algorithm, config.bag, float(bag_rows.max()))
  real = [client_bytes(model_config, algorithm, config.bag, float(b), float(n))
          for b, n in zip(bag_rows, labels)]
  return {"bytes_down_per_client": int(down), "bytes_up_per_client": int(up),
          "mean_real_bytes_down_per_client": float(np.mean([d for d, _ in real])),
          "mean_real_bytes_up_per_client": float(np.mean([u for _, u in real]))}


def _evaluation(task: XCTask, ks: Tuple[int, ...]
                ) -> Tuple[Callable[[tf.keras.Model, str], Dict[str, float]], str]:
  """(evaluate(model, split), the monitored metric): P@k over every class, or
  MAP@R among unseen classes when the test classes are held out of training."""
  splits = {"validation": task.validation, "test": task.test}
  if task.config.class_split == "disjoint":
    return (lambda model, split: classification_metrics.evaluate_retrieval(
        model, splits[split])), "map@r"
  return (lambda model, split: classification_metrics.evaluate_classifier(
      model, splits[split], ks)), "precision@1"


def most_frequent_labels_baseline(task: xc_task.XCTask,
                                   ks: Sequence[int]) -> Dict[str, float]:
  """P@k of predicting, for every test point, the labels most frequent among
  all labels of the training points (not only the ones the clients keep)."""
  counts = np.bincount(np.concatenate(task.train.label_sets), minlength=task.num_labels)
  top = np.argsort(-counts, kind="stable")[:max(ks)]
  return units.with_standard_error(classification_metrics.precision_recall_at_k(
      np.tile(top, (len(task.test), 1)), task.test.label_sets, ks), "precision@1")


def _baselines(task: XCTask, ks: Sequence[int]) -> Callable[[], Dict[str, Any]]:
  """The trivial baseline results.json carries: the most frequent labels (P@k);
  none where the test classes are unseen in training (no frequencies)."""
  if task.config.class_split != "points":
    return dict
  return lambda: {"most_frequent_labels_baseline": most_frequent_labels_baseline(task, ks)}


def _run_config(task: XCTask, model_config: xc_encoder.XCEncoderConfig,
                training) -> Dict[str, Any]:
  return {"task": task.config.describe(), "task_fingerprint": xc_task.fingerprint(task),
          "model": dataclasses.asdict(model_config),
          "training": dataclasses.asdict(training)}


def _export(model_config: xc_encoder.XCEncoderConfig):
  return lambda model, directory: export.export_xc_classifier(model, model_config,
                                                              directory)


def train_xc_federated(task: XCTask, config: XCFederatedConfig, output_dir: str) -> Dict[str, Any]:
  """Trains (or resumes) one algorithm on the XC task; exports the classifier."""
  model_config = model_config_for(task, config)
  evaluate, monitored = _evaluation(task, config.ks)
  job = federated_loop.FederatedJob(
      name=f"federated {config.algorithm}",
      run_config=_run_config(task, model_config, config),
      build_process=lambda: build_process(task, model_config, config),
      clients=task.clients,
      build_server_model=lambda: xc_encoder.build_xc_classifier(model_config,
                                                                config.seed),
      evaluate=evaluate,
      monitored=monitored,
      export=_export(model_config),
      results={"algorithm": config.algorithm, "task": task.summary(),
               "partition": task.config.partition},
      baselines=_baselines(task, config.ks),
      round_metrics=round_bytes(task, model_config, config),
      client_shards=fedavg.shards_of(config),
      splits_across_workers=config.algorithm in (fedaws.WHOLE_MODEL_ALGORITHMS +
                                                 fedss.WHOLE_MODEL_ALGORITHMS))
  return federated_loop.run_federated(job, config, output_dir)


@dataclasses.dataclass(frozen=True)
class XCCentralizedConfig:
  """A centralized reference: full softmax over every class with Adam, on the
  pooled examples of `label_assignment` (`sample`: one example a point, its
  drawn label; `all`: one example a point, its labels as a soft target),
  evaluated every `eval_every_steps` batches (default: once a pass) from
  `min_passes` on until the stopping rule ends it."""
  label_assignment: str = "all"
  optimizer: str = "adam"
  learning_rate: float = 0.001
  batch_size: int = 64
  epochs: int = 100  # The cap, in passes.
  steps: Optional[int] = None
  eval_every_steps: Optional[int] = None
  min_passes: float = 5.0
  patience: int = 5
  min_improvement_se: float = 1.0
  smoothing: int = 1
  steps_per_execution: int = 100
  seed: int = 0

  def __post_init__(self):
    if self.label_assignment not in xc_task.LABEL_ASSIGNMENTS:
      raise ValueError(f"label_assignment must be one of "
                       f"{', '.join(xc_task.LABEL_ASSIGNMENTS)}, got "
                       f"'{self.label_assignment}'")
    self.stopping_rule  # Validates --patience, --min_improvement_se, --smoothing.

  @property
  def stopping_rule(self) -> early_stopping.StoppingRule:
    return early_stopping.StoppingRule.from_flags(self.patience, self.min_improvement_se,
                                                  self.smoothing)


# The comparison's row name of each centralized reference.
CENTRALIZED_SETTINGS = {"sample": "centralized_one_label",
                        "all": "centralized_all_labels"}


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


def reference_run_config(task: XCTask, model_config: xc_encoder.XCEncoderConfig,
                         config: XCCentralizedConfig) -> Dict[str, Any]:
  """What a reference's result depends on: the points and splits (not how
  clients are dealt), its examples, the model and its training."""
  points, targets, _ = reference_examples(task, config.label_assignment)
  return {"task": task.config.describe_points(),
          "task_fingerprint": xc_task.fingerprint(task, points, targets),
          "model": dataclasses.asdict(model_config),
          "training": dataclasses.asdict(config)}


def train_xc_centralized(task: XCTask, federated: XCFederatedConfig,
                         config: XCCentralizedConfig, output_dir: str
                         ) -> Dict[str, Any]:
  """The federated runs' tower and class table (architecture and logit scale
  of `federated`) trained centrally with full softmax; exported likewise."""
  model_config = model_config_for(task, federated)
  points, targets, loss = reference_examples(task, config.label_assignment)
  inputs = (task.train.feature_ids[points], task.train.feature_values[points])
  evaluate, monitored = _evaluation(task, federated.ks)
  setting = CENTRALIZED_SETTINGS[config.label_assignment]

  job = centralized_loop.CentralizedJob(
      name=setting, run_config=reference_run_config(task, model_config, config),
      build_model=lambda: xc_encoder.build_xc_classifier(model_config, federated.seed),
      loss=loss, train_arrays=lambda: (inputs, targets), num_examples=len(points),
      evaluate=evaluate,
      monitored=monitored, export=_export(model_config),
      results={"algorithm": setting, "label_assignment": config.label_assignment,
               "task": task.summary()},
      baselines=_baselines(task, federated.ks))
  return centralized_loop.run_centralized(job, config, output_dir)
