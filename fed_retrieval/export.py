"""Export of trained models for serving: the dual encoder (and loading it back),
and the XC classifier (`export_xc_classifier`).

An export directory holds:
- `query_tower.keras`: the Keras query tower (context rows [B, L] -> embeddings
  [B, D]), in Keras's own format (an export written before it holds
  `query_tower/`, a SavedModel, and is read as well);
- `item_embeddings.npy`: the item tower's output for every dense row [V, D]
  (row 0 is padding and never retrieved);
- `item_ids.npy`: the log's id of every row [V], integers or text (an
  export written before dense ids has none and is read as row = item id);
- `index/` (brute-force exports): a SavedModel for serving, whose call and
  `serving_default` signature are a `tfrs.layers.factorized_top_k.BruteForce`
  layer's: the log's item ids of a context ([B, L] int64, or strings for text
  ids; most recent first, padded with 0 or ''; unknown ids are ignored) ->
  top-k scores and item ids (k fixed at export);
- `approximate_index/` (approximate exports): a faiss IVF index over the item
  rows 1.. (`top_k_index`), its parameters and the recall@k it reached against
  the exact top-k on the query tower's embeddings of random item contexts;
- `export.json`: k, the model config and the index's `IndexInfo`.

`load_export(dir).top_k(contexts, k)` answers with either index; `--index=auto`
picks the approximate one from `top_k_index.APPROXIMATE_FROM` items up.
"""

import dataclasses
import json
import os
from typing import Dict, Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_recommenders as tfrs

from fed_retrieval import top_k_index
from fed_retrieval.models import dual_encoder
from fed_retrieval.models import xc_encoder
from fed_retrieval.models.xc_encoder import XCEncoderConfig
from tasks import atomic_output
from tasks.movielens import item_vocabulary
from tasks.movielens.item_vocabulary import ItemVocabulary

EXPORT_INFO = "export.json"
QUERY_TOWER = "query_tower.keras"
APPROXIMATE_INDEX = "approximate_index"
CALIBRATION_CONTEXTS = 1000


@dataclasses.dataclass(frozen=True)
class RetrievalExport:
  """A loaded export: everything needed to score and retrieve."""
  directory: str
  config: dual_encoder.DualEncoderConfig
  k: int
  query_tower: tf.keras.Model
  item_embeddings: np.ndarray
  items: ItemVocabulary
  index_info: top_k_index.IndexInfo
  _indexes: Dict[str, top_k_index.TopKIndex] = dataclasses.field(
      default_factory=dict, repr=False, compare=False)  # Loaded once, by kind.

  def scores(self, contexts: tf.Tensor) -> tf.Tensor:
    """Scores [B, V] of contexts against every item, as the training model gives."""
    return dual_encoder.score_items(self.query_tower(contexts),
                                    tf.constant(self.item_embeddings))

  def load_index(self):
    """The brute-force TFRS SavedModel (item ids of a context -> top-k ids)."""
    return tf.saved_model.load(os.path.join(self.directory, "index"))

  def item_index(self, kind: str = top_k_index.AUTO) -> top_k_index.TopKIndex:
    """The index over the item rows 1.. (`auto`: the one exported); an
    approximate one only if the export holds it. Loaded on first use, then
    kept: `top_k` on every request does not read or hash the table again."""
    kind = self.index_info.kind if kind == top_k_index.AUTO else kind
    if kind not in self._indexes:
      table = self.item_embeddings[1:]
      if kind == "brute_force":
        self._indexes[kind] = top_k_index.BruteForceIndex(table)
      elif self.index_info.kind != kind:
        raise ValueError(f"--model_dir={self.directory} holds no {kind} index (it was "
                         f"exported with --index={self.index_info.kind}): export "
                         f"again with --index={kind}")
      else:
        self._indexes[kind] = top_k_index.load(
            os.path.join(self.directory, APPROXIMATE_INDEX), table)
    return self._indexes[kind]

  def top_k(self, contexts: np.ndarray, k: int, kind: str = top_k_index.AUTO
            ) -> Tuple[np.ndarray, np.ndarray]:
    """(scores [B, k], dense item rows [B, k]) of contexts [B, L] of dense rows;
    a row of 0 (with score -inf) where an approximate index found fewer."""
    if not 1 <= k <= self.items.num_items:
      raise ValueError(f"--k={k} must lie in [1, {self.items.num_items}] "
                       "(the model's items)")
    scores, rows = self.item_index(kind).search(
        self.query_tower(tf.constant(contexts)).numpy(), k)
    return scores, np.where(rows < 0, -1, rows) + 1


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


class ServingIndex(tf.Module):
  """A TFRS brute-force index saved as its call alone: the log's item ids of
  contexts [B, L] -> (scores, item ids) [B, k], with the variables and the
  id lookup table the call reads. Saving the Keras layer itself would also
  trace every sub-layer for Keras metadata that serving never reads: with it,
  and the query tower as a SavedModel, an export of a fresh 400-item model
  took 1.50 s here; with this and `query_tower.keras`, 0.36 s (medians of 6)."""

  def __init__(self, index: tfrs.layers.factorized_top_k.BruteForce,
               ids: tf.TensorSpec):
    super().__init__()
    self.index_variables = list(index.variables)
    self.id_lookup = index.query_model.get_layer("item_id_to_row").lookup_table
    self.__call__ = tf.function(lambda item_ids: index(item_ids), input_signature=[ids])

  def save(self, directory: str) -> None:
    tf.saved_model.save(self, directory, signatures=self.__call__.get_concrete_function())


def _brute_force_index(query_tower: tf.keras.Model, item_embeddings: np.ndarray,
                       items: ItemVocabulary, k: int, max_context_length: int
                       ) -> ServingIndex:
  index = tfrs.layers.factorized_top_k.BruteForce(
      query_tower_on_item_ids(query_tower, items, max_context_length), k=k)
  # Padding (row 0) is never retrieved; the others answer with the file's ids.
  index.index(tf.constant(item_embeddings[1:]), tf.constant(items.ids[1:]))
  return ServingIndex(index, tf.TensorSpec([None, max_context_length], name="item_ids",
                                           dtype=tf.string if items.is_text else tf.int64))


def _calibration_queries(query_tower: tf.keras.Model, num_items: int,
                         max_context_length: int, seed: int = 0) -> np.ndarray:
  """The query tower on contexts of uniformly random items: queries for the
  approximate index's nprobe when no data is at hand (`evaluate` states the
  recall on the test contexts)."""
  contexts = np.random.default_rng(seed).integers(
      1, num_items + 1, [CALIBRATION_CONTEXTS, max_context_length], dtype=np.int32)
  return query_tower(tf.constant(contexts)).numpy()


def export_model(model: tf.keras.Model, config: dual_encoder.DualEncoderConfig,
                 items: ItemVocabulary, export_dir: str, k: int = 10,
                 index: str = top_k_index.AUTO,
                 target_recall: float = top_k_index.TARGET_RECALL) -> str:
  """Writes the export directory; it appears whole or not at all. `index`:
  brute_force, approximate or auto (by the number of items)."""
  if items.size != config.vocabulary_size:
    raise ValueError(f"{items.num_items} item ids for a model of "
                     f"{config.vocabulary_size - 1} items")
  if not 1 <= k < config.vocabulary_size:
    raise ValueError(f"--k={k} must lie in [1, {config.vocabulary_size - 1}] "
                     "(the number of items)")
  kind = top_k_index.resolve_kind(index, items.num_items)
  with atomic_output.staged_directory(export_dir, "export_dir",
                                      replace=True) as staging:
    query = dual_encoder.query_tower(model)
    embeddings = dual_encoder.item_embeddings(model).numpy()
    query.save(os.path.join(staging, QUERY_TOWER))
    np.save(os.path.join(staging, "item_embeddings.npy"), embeddings)
    items.save(staging)
    if kind == "brute_force":
      _brute_force_index(query, embeddings, items, k, config.max_context_length).save(
          os.path.join(staging, "index"))
      info = top_k_index.BruteForceIndex(embeddings[1:]).info
    else:
      approximate = top_k_index.ApproximateIndex.build(
          embeddings[1:], _calibration_queries(query, items.num_items,
                                               config.max_context_length),
          k=k, target_recall=target_recall,
          calibrated_on=f"the query tower on {CALIBRATION_CONTEXTS} contexts of "
          "random items")
      approximate.save(os.path.join(staging, APPROXIMATE_INDEX))
      info = approximate.info
    with open(os.path.join(staging, EXPORT_INFO), "w") as f:
      json.dump({"k": k, "model_config": json.loads(config.to_json()),
                 "index": dataclasses.asdict(info)}, f, indent=2)
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
  query_path = os.path.join(export_dir, QUERY_TOWER)
  if not os.path.exists(query_path):  # Older exports: a SavedModel.
    query_path = os.path.join(export_dir, "query_tower")
  query = tf.keras.models.load_model(query_path, compile=False)
  index_info = (top_k_index.IndexInfo(**info["index"]) if "index" in info else
                top_k_index.BruteForceIndex(embeddings[1:]).info)  # Older exports.
  return RetrievalExport(export_dir, config, int(info["k"]), query, embeddings,
                         items, index_info)


def export_xc_classifier(model: tf.keras.Model, config: XCEncoderConfig,
                         export_dir: str) -> str:
  """An XC classifier for serving: `instance_tower/` (Keras: (feature ids + 1,
  values) [B, F] -> embeddings [B, D]), `class_embeddings.npy` (rows [C, D];
  scores are their dot products), `export.json` (the model config). Both
  embeddings are unit rows unless the model scores dot products
  (`scoring`). The directory appears whole or not at all."""
  with atomic_output.staged_directory(export_dir, "export_dir",
                                      replace=True) as staging:
    tower = xc_encoder.instance_tower(model)
    tower.save(os.path.join(staging, "instance_tower"), include_optimizer=False)
    np.save(os.path.join(staging, "class_embeddings.npy"),
            xc_encoder.scored_class_table(model).numpy())
    with open(os.path.join(staging, EXPORT_INFO), "w") as f:
      json.dump({"model_config": dataclasses.asdict(config)}, f, indent=2)
  return export_dir
