"""Export of trained models for serving: the dual encoder (and loading it back),
and the XC classifier (`export_xc_classifier`).

An export directory holds:
- `query_tower/`: the Keras query tower (context rows [B, L] -> embeddings [B, D]);
- `item_embeddings.npy`: the item tower's output for every dense row [V, D]
  (row 0 is padding and never retrieved);
- `item_ids.npy`: the log's id of every row [V], integers or text (an
  export written before dense ids has none and is read as row = item id);
- `index/`: a `tfrs.layers.factorized_top_k.BruteForce` SavedModel for
  serving: the log's item ids of a context ([B, L] int64, or strings for text
  ids; most recent first, padded with 0 or ''; unknown ids are ignored) ->
  top-k scores and item ids (k fixed at export);
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
from tasks.movielens import item_vocabulary
from tasks.movielens.item_vocabulary import ItemVocabulary

EXPORT_INFO = "export.json"


@dataclasses.dataclass(frozen=True)
class RetrievalExport:
  """A loaded export: everything needed to score and retrieve."""
  directory: str
  config: dual_encoder.DualEncoderConfig
  k: int
  query_tower: tf.keras.Model
  item_embeddings: np.ndarray
  items: ItemVocabulary

  def scores(self, contexts: tf.Tensor) -> tf.Tensor:
    """Scores [B, V] of contexts against every item, as the training model gives."""
    return dual_encoder.score_items(self.query_tower(contexts),
                                    tf.constant(self.item_embeddings))

  def load_index(self):
    return tf.saved_model.load(os.path.join(self.directory, "index"))


def query_tower_on_item_ids(query_tower: tf.keras.Model, items: ItemVocabulary,
                            max_context_length: int) -> tf.keras.Model:
  """The query tower fed the log's item ids: an id the model does not know
  (and padding) becomes the padding row, i.e. is left out of the context."""
  item_ids = tf.keras.Input(shape=(max_context_length,), name="item_ids",
                            dtype=tf.string if items.is_text else tf.int64)
  lookup = (tf.keras.layers.StringLookup if items.is_text else
            tf.keras.layers.IntegerLookup)(vocabulary=items.ids[1:], num_oov_indices=1,
                                           name="item_id_to_row")
  return tf.keras.Model(item_ids, query_tower(tf.cast(lookup(item_ids), tf.int32)),
                        name="query_tower_on_item_ids")


def _brute_force_index(query_tower: tf.keras.Model, item_embeddings: np.ndarray,
                       items: ItemVocabulary, k: int, max_context_length: int
                       ) -> tfrs.layers.factorized_top_k.BruteForce:
  index = tfrs.layers.factorized_top_k.BruteForce(
      query_tower_on_item_ids(query_tower, items, max_context_length), k=k)
  # Padding (row 0) is never retrieved; the others answer with the file's ids.
  index.index(tf.constant(item_embeddings[1:]), tf.constant(items.ids[1:]))
  return index


def export_model(model: tf.keras.Model, config: dual_encoder.DualEncoderConfig,
                 items: ItemVocabulary, export_dir: str, k: int = 10) -> str:
  """Writes the export directory; it appears whole or not at all."""
  if items.size != config.vocabulary_size:
    raise ValueError(f"{items.num_items} item ids for a model of "
                     f"{config.vocabulary_size - 1} items")
  if not 1 <= k < config.vocabulary_size:
    raise ValueError(f"--k={k} must lie in [1, {config.vocabulary_size - 1}] "
                     "(the number of items)")
  with atomic_output.staged_directory(export_dir, "export_dir",
                                      replace=True) as staging:
    query = dual_encoder.query_tower(model)
    embeddings = dual_encoder.item_embeddings(model).numpy()
    query.save(os.path.join(staging, "query_tower"), include_optimizer=False)
    np.save(os.path.join(staging, "item_embeddings.npy"), embeddings)
    items.save(staging)
    index = _brute_force_index(query, embeddings, items, k,
                               config.max_context_length)
    index(tf.constant(np.full([1, config.max_context_length],  # Build before save.
                              items.ids[0], items.ids.dtype)))
    tf.saved_model.save(index, os.path.join(staging, "index"))
    with open(os.path.join(staging, EXPORT_INFO), "w") as f:
      json.dump({"k": k, "model_config": json.loads(config.to_json())}, f, indent=2)
  return export_dir


def load_export(export_dir: str,
                expected_items: Optional[ItemVocabulary] = None) -> RetrievalExport:
  """Loads an export; refuses a missing/incomplete one or other items."""
  info_path = os.path.join(export_dir, EXPORT_INFO)
  if not os.path.isdir(export_dir):
    raise FileNotFoundError(f"--model_dir={export_dir}: no such export directory")
  if not os.path.isfile(info_path):
    raise FileNotFoundError(f"--model_dir={export_dir}: not an export (no {EXPORT_INFO})")
  with open(info_path) as f:
    info = json.load(f)
  config = dual_encoder.DualEncoderConfig.from_json(json.dumps(info["model_config"]))
  items = item_vocabulary.load(export_dir, size_if_missing=config.vocabulary_size)
  if expected_items is not None and expected_items != items:
    raise ValueError(
        f"--model_dir={export_dir} was exported for {items.num_items} items "
        f"({items.span()}), but the data has {expected_items.num_items} "
        f"({expected_items.span()}): evaluate on the data it was trained on")
  embeddings = np.load(os.path.join(export_dir, "item_embeddings.npy"))
  query = tf.keras.models.load_model(os.path.join(export_dir, "query_tower"),
                                     compile=False)
  return RetrievalExport(export_dir, config, int(info["k"]), query, embeddings,
                         items)


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
