"""Federated training of the XC classifier: FedAwS, FedSS and their baselines.

Builds the `FederatedJob` of one algorithm (FedAwS's fedaws, positive_only,
fixed_class_embeddings, softmax_oracle; FedSS's fedss, neg_only, pos_only,
full_softmax) on an XC task and runs it with the
shared loop (`federated_loop.run_federated`): same sampling, checkpoints,
metrics, early stopping on validation precision@1 (MAP@R when the test
classes are disjoint from the training classes) and resume. The run's
metrics and results carry the bytes each client downloads and uploads per round.
"""

import dataclasses
from typing import Any, Callable, Dict, Optional, Tuple, Union

import tensorflow_federated as tff

from fed_retrieval import export
from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.evaluation import classification_metrics
from fed_retrieval.models import xc_encoder
from fed_retrieval.training import federated_loop
from tasks.xc import xc_task
from tasks.xc.xc_task import XCTask

ALGORITHMS = fedaws.ALGORITHMS + fedss.ALGORITHMS
ARCHITECTURES = {
    "small": dict(bag_dim=64, hidden_dims=(128,), embedding_dim=64),
    "paper": xc_encoder.PAPER_ARCHITECTURE,
}


@dataclasses.dataclass(frozen=True)
class XCFederatedConfig:
  """An XC federated run: the algorithm, its family's settings, the model and
  the loop's settings."""
  algorithm: str = "fedaws"
  fedaws: FedAwSConfig = FedAwSConfig()
  fedss: FedSSConfig = FedSSConfig()
  architecture: str = "small"
  logit_scale: float = 20.0
  rounds: int = 300
  clients_per_round: int = 100
  local_epochs: int = 1
  batch_size: int = 16
  eval_every: int = 5
  checkpoint_every: int = 5
  patience: int = 4
  min_delta: float = 0.01
  seed: int = 0
  ks: Tuple[int, ...] = classification_metrics.DEFAULT_KS

  def __post_init__(self):
    if self.algorithm not in ALGORITHMS:
      raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)} for the "
                       f"XC task, got '{self.algorithm}'")
    if self.architecture not in ARCHITECTURES:
      raise ValueError(f"--xc_architecture must be one of {', '.join(ARCHITECTURES)}, "
                       f"got '{self.architecture}'")
    federated_loop.check_loop_settings(self)


def model_config_for(task: XCTask, config: XCFederatedConfig
                     ) -> xc_encoder.XCEncoderConfig:
  return xc_encoder.XCEncoderConfig(task.num_features, task.num_labels,
                                    logit_scale=config.logit_scale,
                                    **ARCHITECTURES[config.architecture])


def algorithm_config(task: XCTask, config: XCFederatedConfig
                     ) -> Union[FedAwSConfig, FedSSConfig]:
  """The settings of `config.algorithm`, sized to the task's clients."""
  if config.algorithm in fedss.ALGORITHMS:
    return dataclasses.replace(config.fedss, algorithm=config.algorithm,
                               positives_per_client=task.max_labels_per_client())
  return dataclasses.replace(config.fedaws, algorithm=config.algorithm,
                             rows_per_client=task.max_labels_per_client())


def process_and_bytes(task: XCTask, model_config: xc_encoder.XCEncoderConfig,
                      config: XCFederatedConfig
                      ) -> Tuple[Callable[[], tff.learning.templates.LearningProcess],
                                 Tuple[int, int]]:
  """(builder of the algorithm's process, (bytes down, up) per client per round)."""
  algorithm = algorithm_config(task, config)
  max_features = task.config.max_features
  if isinstance(algorithm, FedSSConfig):
    return (lambda: fedss.build_xc_process(model_config, algorithm, max_features,
                                           config.seed),
            fedss.bytes_per_client(model_config.weight_shapes(), model_config.num_labels,
                                   model_config.embedding_dim, algorithm))
  return (lambda: fedaws.build_process(model_config, algorithm, max_features,
                                       config.seed),
          fedaws.bytes_per_client(model_config, algorithm))


def train_xc_federated(task: XCTask, config: XCFederatedConfig, output_dir: str,
                       progress: Optional[bool] = None) -> Dict[str, Any]:
  """Trains (or resumes) one algorithm on the XC task; exports the classifier."""
  model_config = model_config_for(task, config)
  build_process, (down, up) = process_and_bytes(task, model_config, config)
  splits = {"validation": task.validation, "test": task.test}
  if task.config.class_split == "disjoint":  # Retrieval among unseen classes.
    evaluate = lambda model, split: classification_metrics.evaluate_retrieval(
        model, splits[split])
    monitored = "map@r"
  else:
    evaluate = lambda model, split: classification_metrics.evaluate_classifier(
        model, splits[split], config.ks)
    monitored = "precision@1"
  job = federated_loop.FederatedJob(
      name=config.algorithm,
      run_config={"task": task.config.describe(),
                  "task_fingerprint": xc_task.fingerprint(task),
                  "model": dataclasses.asdict(model_config),
                  "training": dataclasses.asdict(config)},
      build_process=build_process,
      clients=task.clients,
      build_server_model=lambda: xc_encoder.build_xc_classifier(model_config,
                                                                config.seed),
      evaluate=evaluate,
      monitored=monitored,
      export=lambda model, directory: export.export_xc_classifier(
          model, model_config, directory),
      results={"algorithm": config.algorithm,
               "partition": task.config.partition},
      round_metrics={"bytes_down_per_client": down, "bytes_up_per_client": up})
  return federated_loop.run_federated(job, config, output_dir, progress)
