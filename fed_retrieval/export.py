"""Export of trained models for serving: the dual encoder (and loading it back),
and the XC classifier (`export_xc_classifier`).

An export directory holds:
- `query_tower/`: the Keras query tower (context ids [B, L] -> embeddings [B, D]);
- `item_embeddings.npy`: the item tower's output for every id [V, D] (row 0 is
  padding and never retrieved);
- `index/`: a `tfrs.layers.factorized_top_k.BruteForce` SavedModel mapping a
  context to the top-k item ids and scores (k fixed at export);
- `export.json`: vocabulary size, context length, k and the model config.
"""

import dataclasses
import json
import os
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs

from fed_retrieval.models import dual_encoder
from fed_retrieval.models import xc_encoder
from fed_retrieval.models.xc_encoder import XCEncoderConfig
from tasks import atomic_output

EXPORT_INFO = "export.json"


@dataclasses.dataclass(frozen=True)
class RetrievalExport:
  """A loaded export: everything needed to score and retrieve."""
  directory: str
  config: dual_encoder.DualEncoderConfig
  k: int
  query_tower: tf.keras.Model
  item_embeddings: np.ndarray

  def scores(self, contexts: tf.Tensor) -> tf.Tensor:
    """Scores [B, V] of contexts against every item, as the training model gives."""
    return dual_encoder.score_items(self.query_tower(contexts),
                                    tf.constant(self.item_embeddings))

  def load_index(self):
    return tf.saved_model.load(os.path.join(self.directory, "index"))


def _brute_force_index(query_tower: tf.keras.Model, item_embeddings: np.ndarray,
                       k: int) -> tfrs.layers.factorized_top_k.BruteForce:
  index = tfrs.layers.factorized_top_k.BruteForce(query_tower, k=k)
  ids = tf.range(1, item_embeddings.shape[0])  # Padding is never retrieved.
  index.index(tf.constant(item_embeddings[1:]), ids)
  return index


def export_model(model: tf.keras.Model, config: dual_encoder.DualEncoderConfig,
                 export_dir: str, k: int = 10) -> str:
  """Writes the export directory; it appears whole or not at all."""
  if not 1 <= k < config.vocabulary_size:
    raise ValueError(f"--k={k} must lie in [1, {config.vocabulary_size - 1}] "
                     "(the number of items)")
  with atomic_output.staged_directory(export_dir, "export_dir",
                                      replace=True) as staging:
    query = dual_encoder.query_tower(model)
    items = dual_encoder.item_embeddings(model).numpy()
    query.save(os.path.join(staging, "query_tower"), include_optimizer=False)
    np.save(os.path.join(staging, "item_embeddings.npy"), items)
    index = _brute_force_index(query, items, k)
    index(tf.zeros([1, config.max_context_length], tf.int32))  # Build before save.
    tf.saved_model.save(index, os.path.join(staging, "index"))
    with open(os.path.join(staging, EXPORT_INFO), "w") as f:
      json.dump({"k": k, "model_config": json.loads(config.to_json())}, f, indent=2)
  return export_dir


def load_export(export_dir: str,
                expected_vocabulary_size: Optional[int] = None) -> RetrievalExport:
  """Loads an export; refuses a missing/incomplete one or another vocabulary."""
  info_path = os.path.join(export_dir, EXPORT_INFO)
  if not os.path.isdir(export_dir):
    raise FileNotFoundError(f"--model_dir={export_dir}: no such export directory")
  if not os.path.isfile(info_path):
    raise FileNotFoundError(f"--model_dir={export_dir}: not an export (no {EXPORT_INFO})")
  with open(info_path) as f:
    info = json.load(f)
  config = dual_encoder.DualEncoderConfig.from_json(json.dumps(info["model_config"]))
  if (expected_vocabulary_size is not None and
      expected_vocabulary_size != config.vocabulary_size):
    raise ValueError(
        f"--model_dir={export_dir} was exported for a vocabulary of "
        f"{config.vocabulary_size} items, but the data has {expected_vocabulary_size}")
  items = np.load(os.path.join(export_dir, "item_embeddings.npy"))
  query = tf.keras.models.load_model(os.path.join(export_dir, "query_tower"),
                                     compile=False)
  return RetrievalExport(export_dir, config, int(info["k"]), query, items)


def export_xc_classifier(model: tf.keras.Model, config: XCEncoderConfig,
                         export_dir: str) -> str:
  """An XC classifier for serving: `instance_tower/` (Keras: (feature ids + 1,
  values) [B, F] -> unit embeddings [B, D]), `class_embeddings.npy` (unit rows
  [C, D]; scores are their dot products), `export.json` (the model config).
  The directory appears whole or not at all."""
  with atomic_output.staged_directory(export_dir, "export_dir",
                                      replace=True) as staging:
    tower = xc_encoder.instance_tower(model)
    tower.save(os.path.join(staging, "instance_tower"), include_optimizer=False)
    np.save(os.path.join(staging, "class_embeddings.npy"),
            tf.math.l2_normalize(xc_encoder.class_table(model), axis=1).numpy())
    with open(os.path.join(staging, EXPORT_INFO), "w") as f:
      json.dump({"model_config": dataclasses.asdict(config)}, f, indent=2)
  return export_dir
