"""Seconds and peak memory of one FedSS round against the size of the label space.

A FedSS client's work and traffic depend on its key set (positives + sampled
negatives), not on the number of classes; the server still holds, and
aggregates rows into, the whole table. The benchmark builds random clients
(each with `classes_per_client` classes and `points_per_client` points of
random sparse features), runs one warm-up round of the algorithm's process
and times `repeats` more; peak RSS is the process's (run one configuration per
process, as `scripts.benchmark_round_cost` does).
"""

import resource
import time
from typing import Any, Dict, List

import numpy as np
import tensorflow as tf

from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.models import xc_encoder
from fed_retrieval.runtime import tff_runtime

FEATURES_PER_POINT = 16


def random_clients(num_clients: int, points_per_client: int, classes_per_client: int,
                   num_classes: int, num_features: int, batch_size: int,
                   seed: int) -> List[tf.data.Dataset]:
  rng = np.random.default_rng(seed)
  datasets = []
  for _ in range(num_clients):
    classes = rng.choice(num_classes, classes_per_client, replace=False)
    labels = classes[rng.integers(0, classes_per_client, points_per_client)]
    ids = rng.integers(1, num_features + 1, (points_per_client, FEATURES_PER_POINT))
    values = rng.random((points_per_client, FEATURES_PER_POINT))
    datasets.append(tf.data.Dataset.from_tensor_slices(
        ((ids.astype(np.int32), values.astype(np.float32)), labels.astype(np.int32))
    ).batch(batch_size))
  return datasets


def round_benchmark(num_classes: int, algorithm: str = "fedss", num_negatives: int = 500,
                    num_features: int = 20_000, num_clients: int = 100,
                    points_per_client: int = 100, classes_per_client: int = 10,
                    batch_size: int = 16, repeats: int = 3, seed: int = 0
                    ) -> Dict[str, Any]:
  model = xc_encoder.XCEncoderConfig(num_features, num_classes, bag_dim=64,
                                     hidden_dims=(128,), embedding_dim=64)
  config = FedSSConfig(algorithm=algorithm, num_negatives=num_negatives,
                       positives_per_client=classes_per_client)
  clients = random_clients(num_clients, points_per_client, classes_per_client,
                           num_classes, num_features, batch_size, seed)
  with tff_runtime.local_execution_context():
    process = fedss.build_xc_process(model, config, FEATURES_PER_POINT, seed)
    state = process.initialize()
    state = process.next(state, clients).state  # Warm-up: traces and compiles.
    seconds = []
    for _ in range(repeats):
      start = time.perf_counter()
      state = process.next(state, clients).state
      seconds.append(time.perf_counter() - start)
  down, up = fedss.bytes_per_client(model.weight_shapes(), num_classes,
                                    model.embedding_dim, config)
  return {"algorithm": algorithm, "num_classes": num_classes,
          "keys_per_client": config.num_keys(num_classes),
          "clients_per_round": num_clients,
          "seconds_per_round_min": min(seconds),
          "seconds_per_round_mean": float(np.mean(seconds)),
          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
          "bytes_down_per_client": down, "bytes_up_per_client": up,
          "class_table_bytes": 4 * num_classes * model.embedding_dim}
