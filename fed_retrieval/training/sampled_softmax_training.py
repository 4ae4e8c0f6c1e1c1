"""Sampled global softmax on MovieLens: FedSS with items as classes.

The dual encoder's item table is the whole model (no hidden layers), so a
client needs only the rows of the items its examples touch (contexts and
labels) plus its sampled negatives (`fedss.build_movielens_process`). The job
runs in the shared loop (`federated_loop.run_federated`) with the loop
settings of a `FederatedConfig` (rounds, clients, batch size, evaluation,
patience, seed) and the client and server optimization of a `FedSSConfig`;
`full_softmax` is the same process with the whole table broadcast, so the two
differ only in which rows the clients see.

The key set has a fixed size in TFF (`federated_select` needs one), so every
client's positive slots are the largest count of distinct items any training
client touches; the metrics carry the bytes of that padded set
(`bytes_down_per_client`) and of the rows clients actually need, on average
(`mean_real_bytes_down_per_client`), which is what a deployment would send.
"""

import dataclasses
from typing import Any, Dict, Optional

import numpy as np

from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms import sub_model
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.training import centralized_loop
from fed_retrieval.training import federated_loop
from fed_retrieval.training.federated_loop import FederatedConfig
from tasks.movielens.movielens_task import MovieLensTask
from tasks.movielens.sequence_examples import Examples

LOSS = "global_softmax"


def distinct_items_per_user(examples: Examples) -> np.ndarray:
  """For each user, how many distinct items (not padding) its examples touch."""
  counts = []
  for start, stop in examples.user_ranges().values():
    items = np.unique(np.concatenate([examples.contexts[start:stop].ravel(),
                                      examples.labels[start:stop]]))
    counts.append(int(np.count_nonzero(items)))
  return np.asarray(counts)


def train_sampled_softmax(task: MovieLensTask, loop: FederatedConfig,
                          algorithm: FedSSConfig, output_dir: str,
                          embedding_dim: int = 16) -> Dict[str, Any]:
  """FedSS (sampled global softmax) or a baseline of it on a MovieLens task."""
  objective_config = loop.objective.for_loss(LOSS)
  objective = objective_config.build()
  model_config = centralized_loop.model_config_for(task, objective, embedding_dim)
  touched = distinct_items_per_user(task.federated_train)
  vocabulary, dim = model_config.vocabulary_size, model_config.embedding_dim
  algorithm = dataclasses.replace(
      algorithm, positives_per_client=int(touched.max())).for_classes(vocabulary - 1)
  down, up = fedss.bytes_per_client([], vocabulary, dim, algorithm)
  real_keys = (np.full(len(touched), vocabulary) if algorithm.algorithm == "full_softmax"
               else touched + algorithm.negatives)
  setting = f"federated_{algorithm.algorithm}"
  job = federated_loop.FederatedJob(
      name=f"{setting} {LOSS}",
      run_config={"setting": setting, "task": task.describe(),
                  "model": dataclasses.asdict(model_config),
                  "training": dataclasses.asdict(loop),
                  "algorithm": dataclasses.asdict(algorithm)},
      build_process=lambda: fedss.build_movielens_process(
          model_config, algorithm, objective_config.temperature, loop.seed,
          sharded=fedavg.shards_of(loop) > 0),
      **federated_loop.movielens_job_parts(task, model_config, loop),
      results={"setting": setting, "loss": LOSS, "algorithm": algorithm.algorithm},
      round_metrics={"bytes_down_per_client": down, "bytes_up_per_client": up,
                     "mean_real_bytes_down_per_client":
                         float(np.mean(real_keys)) * sub_model.FLOAT_BYTES * dim},
      splits_across_workers=algorithm.algorithm in fedss.WHOLE_MODEL_ALGORITHMS)
  return federated_loop.run_federated(job, loop, output_dir)
