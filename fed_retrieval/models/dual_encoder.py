"""The dual-encoder (two-tower) retrieval model as a functional Keras model.

One item-embedding table (row 0 = padding) is shared by both towers:
- query tower: masked bag-of-words average of the context's item embeddings,
  then optional hidden Dense layers, then optional L2 normalization;
- item tower: embedding lookup, then optional hidden layers and normalization.
Spreadout (losses/spreadout.py) on the item table is the table's Keras
regularizer; on the batch's context embeddings it is a loss-adding layer at
the end of the query tower (only training adds it to the loss).
The full model maps a context [B, L] to its scores against every item of the
vocabulary [B, V] (column 0, padding, is -1e9), which is all the losses and the
recall metrics need; `query_tower` and `item_tower` are sub-models for export.
Losses that read only the batch's positives (batch softmax, the hinge) train
on `batch_candidates_model`, which shares the full model's weights and scores
each context against the batch's positive items only, [B, B]: the same loss
and gradients without the [B, V] product and the dense gradient of the whole
table (`training_model` picks by the loss's `candidates`).
"""

import dataclasses
import json
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf

from losses.spreadout import PADDING_SCORE
from losses.spreadout import SpreadoutActivity
from losses.spreadout import SpreadoutRegularizer
from losses.spreadout import SpreadoutWeights


@dataclasses.dataclass(frozen=True)
class DualEncoderConfig:
  """Architecture of a dual encoder (defaults follow the paper: 16-dim, normalized)."""
  vocabulary_size: int
  max_context_length: int = 10
  embedding_dim: int = 16
  context_hidden_dims: Tuple[int, ...] = ()
  item_hidden_dims: Tuple[int, ...] = ()
  normalize: bool = True
  spreadout: SpreadoutWeights = SpreadoutWeights()

  def __post_init__(self):
    if self.vocabulary_size < 2:
      raise ValueError(f"vocabulary_size must be >= 2, got {self.vocabulary_size}")
    if self.embedding_dim < 1:
      raise ValueError(f"--embedding_dim must be >= 1, got {self.embedding_dim}")
    context_out = (self.context_hidden_dims or (self.embedding_dim,))[-1]
    item_out = (self.item_hidden_dims or (self.embedding_dim,))[-1]
    if context_out != item_out:
      raise ValueError("The towers' output dimensions differ: context "
                       f"{context_out}, item {item_out}")

  @property
  def output_dim(self) -> int:
    return (self.item_hidden_dims or (self.embedding_dim,))[-1]

  def weight_shapes(self) -> List[Tuple[int, ...]]:
    """Shapes of the trainable weights: the item table, then the Dense layers."""
    shapes = [(self.vocabulary_size, self.embedding_dim)]
    for dims in (self.item_hidden_dims, self.context_hidden_dims):
      for fan_in, fan_out in zip((self.embedding_dim,) + dims[:-1], dims):
        shapes += [(fan_in, fan_out), (fan_out,)]
    return shapes

  def to_json(self) -> str:
    return json.dumps(dataclasses.asdict(self), sort_keys=True)

  @classmethod
  def from_json(cls, text: str) -> "DualEncoderConfig":
    values = json.loads(text)
    for key in ("context_hidden_dims", "item_hidden_dims"):
      values[key] = tuple(values[key])
    values["spreadout"] = SpreadoutWeights(**values["spreadout"])
    return cls(**values)


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class MaskedMean(tf.keras.layers.Layer):
  """Mean of the embeddings whose id is not padding (0) along axis 1."""

  def call(self, inputs):
    embeddings, ids = inputs
    mask = tf.cast(tf.not_equal(ids, 0), embeddings.dtype)[..., None]
    total = tf.reduce_sum(embeddings * mask, axis=1)
    return total / tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)


@tf.autograph.experimental.do_not_convert  # Straight-line ops: nothing to convert.
def score_items(queries: tf.Tensor, items: tf.Tensor) -> tf.Tensor:
  """Dot products of queries [B, D] with item embeddings [V, D]; padding -> -1e9."""
  scores = tf.matmul(queries, items, transpose_b=True)
  not_padding = tf.range(tf.shape(items)[0]) > 0
  return tf.where(not_padding[None, :], scores,
                  tf.constant(PADDING_SCORE, scores.dtype))


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class ScoreAllItems(tf.keras.layers.Layer):
  """Scores query embeddings against the item tower of every vocabulary id."""

  def __init__(self, item_tower: tf.keras.Model, vocabulary_size: int, **kwargs):
    super().__init__(**kwargs)
    self.item_tower = item_tower
    self.vocabulary_size = vocabulary_size

  def call(self, queries):
    return score_items(queries, self.item_tower(tf.range(self.vocabulary_size)))

  def get_config(self) -> Dict[str, Any]:
    raise NotImplementedError("Rebuild the model with build_dual_encoder(config)")


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class ScoreBatchItems(tf.keras.layers.Layer):
  """Dot products of queries [B, D] with the batch's item embeddings [B, D]."""

  def call(self, inputs):
    queries, items = inputs
    return tf.matmul(queries, items, transpose_b=True)


def _tower_head(dims: Tuple[int, ...], prefix: str, normalize: bool):
  """Hidden ReLU layers (the last one linear), then optional L2 normalization."""
  layers = [tf.keras.layers.Dense(d, activation=None if i == len(dims) - 1 else "relu",
                                  name=f"{prefix}_dense_{i}")
            for i, d in enumerate(dims)]
  if normalize:
    layers.append(tf.keras.layers.UnitNormalization(axis=-1,
                                                    name=f"{prefix}_normalize"))
  return layers


def build_dual_encoder(config: DualEncoderConfig,
                       seed: Optional[int] = None) -> tf.keras.Model:
  """Builds the uncompiled functional model (TFF needs it uncompiled)."""
  initializer = tf.keras.initializers.RandomNormal(stddev=0.1, seed=seed)
  spreadout = config.spreadout
  regularizer = (SpreadoutRegularizer(spreadout.item, spreadout.form)
                 if spreadout.item > 0 else None)
  table = tf.keras.layers.Embedding(
      config.vocabulary_size, config.embedding_dim,
      embeddings_initializer=initializer, embeddings_regularizer=regularizer,
      name="item_embeddings")
  item_ids = tf.keras.Input(shape=(), dtype=tf.int32, name="item_id")
  item = table(item_ids)
  for layer in _tower_head(config.item_hidden_dims, "item", config.normalize):
    item = layer(item)
  item_tower = tf.keras.Model(item_ids, item, name="item_tower")

  context = tf.keras.Input(shape=(config.max_context_length,), dtype=tf.int32,
                           name="context")
  query = MaskedMean(name="bag_of_items")([table(context), context])
  for layer in _tower_head(config.context_hidden_dims, "context",
                           config.normalize):
    query = layer(query)
  if spreadout.context > 0:
    query = SpreadoutActivity(spreadout.context, spreadout.form,
                              name="context_spreadout")(query)
  query_tower = tf.keras.Model(context, query, name="query_tower")

  scores = ScoreAllItems(item_tower, config.vocabulary_size,
                         name="score_all_items")(query_tower(context))
  return tf.keras.Model(context, scores, name="dual_encoder")


def batch_candidates_model(model: tf.keras.Model) -> tf.keras.Model:
  """A model with `model`'s weights (the same variables, in the same order)
  that scores each context against the batch's positive items only:
  (context [B, L], positive item ids [B]) -> [B, B], column j for item j."""
  context = tf.keras.Input(shape=model.input_shape[1:], dtype=tf.int32,
                           name="context")
  positives = tf.keras.Input(shape=(), dtype=tf.int32, name="positive_item_id")
  scores = ScoreBatchItems(name="score_batch_items")(
      [query_tower(model)(context), item_tower(model)(positives)])
  return tf.keras.Model([context, positives], scores, name="dual_encoder_batch")


def training_model(model: tf.keras.Model, candidates: str) -> tf.keras.Model:
  """What a loss of `candidates` ("vocabulary" or "batch") trains: `model`, or
  its `batch_candidates_model` (whose inputs are (context, positive ids))."""
  if candidates == "vocabulary":
    return model
  if candidates == "batch":
    return batch_candidates_model(model)
  raise ValueError(f"candidates must be 'vocabulary' or 'batch', got '{candidates}'")


def query_tower(model: tf.keras.Model) -> tf.keras.Model:
  return model.get_layer("query_tower")


def item_tower(model: tf.keras.Model) -> tf.keras.Model:
  return model.get_layer("score_all_items").item_tower


def item_embeddings(model: tf.keras.Model) -> tf.Tensor:
  """The item tower's output for every vocabulary id [V, output_dim]."""
  vocabulary_size = model.output_shape[-1]
  return item_tower(model)(tf.range(vocabulary_size))
