"""Federated training of the XC classifier: FedAwS and its baselines.

Builds the `FederatedJob` of one algorithm (fedaws, positive_only,
fixed_class_embeddings, softmax_oracle) on an XC task and runs it with the
shared loop (`federated_loop.run_federated`): same sampling, checkpoints,
metrics, early stopping on validation precision@1 and resume. The run's
metrics and results carry the bytes each client downloads and uploads per round.
"""

import dataclasses
from typing import Any, Dict, Optional, Tuple

from fed_retrieval import export
from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from fed_retrieval.evaluation import classification_metrics
from fed_retrieval.models import xc_encoder
from fed_retrieval.training import federated_loop
from tasks.xc import xc_task
from tasks.xc.xc_task import XCTask

ARCHITECTURES = {
    "small": dict(bag_dim=64, hidden_dims=(128,), embedding_dim=64),
    "paper": xc_encoder.PAPER_ARCHITECTURE,
}


@dataclasses.dataclass(frozen=True)
class XCFederatedConfig:
  """An XC federated run: the algorithm, the model and the loop's settings."""
  algorithm: FedAwSConfig = FedAwSConfig()
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
    if self.architecture not in ARCHITECTURES:
      raise ValueError(f"--xc_architecture must be one of {', '.join(ARCHITECTURES)}, "
                       f"got '{self.architecture}'")
    federated_loop.check_loop_settings(self)


def model_config_for(task: XCTask, config: XCFederatedConfig
                     ) -> xc_encoder.XCEncoderConfig:
  return xc_encoder.XCEncoderConfig(task.num_features, task.num_labels,
                                    logit_scale=config.logit_scale,
                                    **ARCHITECTURES[config.architecture])


def train_xc_federated(task: XCTask, config: XCFederatedConfig, output_dir: str,
                       progress: Optional[bool] = None) -> Dict[str, Any]:
  """Trains (or resumes) one algorithm on the XC task; exports the classifier."""
  model_config = model_config_for(task, config)
  algorithm = dataclasses.replace(config.algorithm,
                                  rows_per_client=task.max_labels_per_client())
  down, up = fedaws.bytes_per_client(model_config, algorithm)
  splits = {"validation": task.validation, "test": task.test}
  job = federated_loop.FederatedJob(
      name=algorithm.algorithm,
      run_config={"task": task.config.describe(),
                  "task_fingerprint": xc_task.fingerprint(task),
                  "model": dataclasses.asdict(model_config),
                  "training": dataclasses.asdict(config)},
      build_process=lambda: fedaws.build_process(
          model_config, algorithm, task.config.max_features, config.seed),
      clients=task.clients,
      build_server_model=lambda: xc_encoder.build_xc_classifier(model_config,
                                                                config.seed),
      evaluate=lambda model, split: classification_metrics.evaluate_classifier(
          model, splits[split], config.ks),
      monitored="precision@1",
      export=lambda model, directory: export.export_xc_classifier(
          model, model_config, directory),
      results={"algorithm": algorithm.algorithm,
               "partition": task.config.partition},
      round_metrics={"bytes_down_per_client": down, "bytes_up_per_client": up})
  return federated_loop.run_federated(job, config, output_dir, progress)
