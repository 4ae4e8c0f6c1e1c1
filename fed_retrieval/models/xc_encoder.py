"""The extreme-classification model: an instance tower and a class table.

Instance tower: sparse features (fixed-width rows of ids + 1 and values, 0 =
padding) -> embedding bag (value-weighted mean of the feature embeddings) ->
Dense layers (ReLU between them) -> L2-normalized instance embedding. With
`dense_layers=False` the tower is the bag alone: a linear map of the
L1-normalized features (`embedding_dim` is then the bag's). With `residual`
the dense layers' output is added to the bag (`embedding_dim` the bag's), the
last layer starting at zero: the tower starts linear and learns what a
nonlinear part adds.
Class table: one row per class. Logits (`scoring`) are `logit_scale` times
the cosine of instance and class embeddings (the table's rows L2-normalized
when scoring), or their dot product with neither embedding normalized
(`dot`: paper 003's unnormalized logits).

The tower is one function of a flat list of weight tensors (`tower_forward`),
so the same arithmetic runs in the Keras model (export, evaluation, the
softmax oracle) and in the FedAwS client's functional training loop.
"""

import dataclasses
from typing import List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from fed_retrieval.models import scoring


# How instances are scored against classes (`XCEncoderConfig.scoring`; None:
# cosine, as every model was before the choice existed).
SCORINGS = ("cosine", "dot")


def check_scoring(scoring: Optional[str]) -> None:
  """Refuses a scoring that is neither None (cosine) nor one of `SCORINGS`."""
  if scoring is not None and scoring not in SCORINGS:
    raise ValueError(f"--xc_scoring must be one of {', '.join(SCORINGS)}, got "
                     f"'{scoring}'")


@dataclasses.dataclass(frozen=True)
class XCEncoderConfig:
  num_features: int
  num_labels: int
  bag_dim: int = 64
  hidden_dims: Tuple[int, ...] = (128,)
  embedding_dim: int = 64
  logit_scale: float = 20.0
  dense_layers: bool = True
  residual: bool = False
  # One of `SCORINGS`; cosine is held as None, so that a run config asking
  # for it is the one made before the choice existed.
  scoring: Optional[str] = None

  def __post_init__(self):
    check_scoring(self.scoring)
    if self.scoring == "cosine":
      object.__setattr__(self, "scoring", None)
    for name in ("num_features", "num_labels", "bag_dim", "embedding_dim"):
      if getattr(self, name) < 1:
        raise ValueError(f"XC model: {name} must be >= 1, got {getattr(self, name)}")
    if not self.dense_layers and (self.hidden_dims or
                                  self.embedding_dim != self.bag_dim):
      raise ValueError("XC model without dense layers: the embedding is the bag "
                       "(no hidden_dims, embedding_dim == bag_dim)")
    if self.residual and (not self.dense_layers or self.embedding_dim != self.bag_dim):
      raise ValueError("XC model with a residual tower: dense layers whose output "
                       "is as wide as the bag (embedding_dim == bag_dim)")

  def weight_shapes(self) -> List[Tuple[int, ...]]:
    """Shapes of the tower's weights, in `tower_forward` order."""
    shapes = [(self.num_features + 1, self.bag_dim)]
    if not self.dense_layers:
      return shapes
    dims = (self.bag_dim,) + tuple(self.hidden_dims) + (self.embedding_dim,)
    for fan_in, fan_out in zip(dims[:-1], dims[1:]):
      shapes += [(fan_in, fan_out), (fan_out,)]
    return shapes


# The paper's extreme-classification architecture: 512-dim bag, 1024-1024-512.
PAPER_ARCHITECTURE = dict(bag_dim=512, hidden_dims=(1024, 1024), embedding_dim=512)
# What the centralized references on Bibtex favour: the bag alone, 256-dim.
LINEAR_ARCHITECTURE = dict(bag_dim=256, hidden_dims=(), embedding_dim=256,
                           dense_layers=False)
# The 256-dim bag plus a ReLU layer of 512 added back to it.
RESIDUAL_ARCHITECTURE = dict(bag_dim=256, hidden_dims=(512,), embedding_dim=256,
                             residual=True)


def initial_tower_weights(config: XCEncoderConfig, seed: int) -> List[np.ndarray]:
  """Glorot-uniform kernels and bag embeddings, zero biases (row 0 of the bag: 0)."""
  rng = np.random.default_rng([seed, 11])
  weights = []
  for shape in config.weight_shapes():
    if len(shape) == 1:
      weights.append(np.zeros(shape, np.float32))
      continue
    limit = np.sqrt(6.0 / sum(shape))
    weights.append(rng.uniform(-limit, limit, shape).astype(np.float32))
  weights[0][0] = 0.0
  if config.residual:
    weights[-2][:] = 0.0  # The last kernel: the residual part starts at zero.
  return weights


def initial_class_table(config: XCEncoderConfig, seed: int) -> np.ndarray:
  """Random unit rows (nearly orthogonal in high dimension)."""
  rng = np.random.default_rng([seed, 12])
  table = rng.normal(size=(config.num_labels, config.embedding_dim)).astype(np.float32)
  return table / np.linalg.norm(table, axis=1, keepdims=True)


@tf.autograph.experimental.do_not_convert  # Straight-line ops: nothing to convert.
def tower_forward(weights: Sequence[tf.Tensor], feature_ids: tf.Tensor,
                  feature_values: tf.Tensor, residual: bool = False,
                  normalize: bool = True) -> tf.Tensor:
  """Instance embeddings [B, D] of padded sparse rows [B, F], L2-normalized
  unless not `normalize` (`residual`: the dense layers' output added to the
  bag)."""
  bag = tf.gather(weights[0], feature_ids)  # [B, F, bag_dim]
  values = tf.where(feature_ids > 0, feature_values, tf.zeros_like(feature_values))
  total = tf.reduce_sum(tf.abs(values), axis=1, keepdims=True)
  bagged = tf.einsum("bf,bfd->bd", values / tf.maximum(total, 1e-12), bag)
  hidden = bagged
  layers = list(zip(weights[1::2], weights[2::2]))
  for i, (kernel, bias) in enumerate(layers):
    hidden = tf.matmul(hidden, kernel) + bias
    if i < len(layers) - 1:
      hidden = tf.nn.relu(hidden)
  output = bagged + hidden if residual else hidden
  return scoring.l2_normalize(output) if normalize else output


def normalizes(config: XCEncoderConfig) -> bool:
  """Whether `config` scores cosines (both embeddings L2-normalized)."""
  return config.scoring != "dot"


def scored_rows(rows: tf.Tensor, config: XCEncoderConfig) -> tf.Tensor:
  """Class rows [n, D] as `config` scores instances against them."""
  return scoring.l2_normalize(rows) if normalizes(config) else rows


def class_logits(instance_embeddings: tf.Tensor, rows: tf.Tensor,
                 config: XCEncoderConfig) -> tf.Tensor:
  """Logits [B, n] of instance embeddings [B, D] (the tower's) against class
  rows [n, D]: `logit_scale` x cosine, or the dot product (`scoring`)."""
  scores = tf.matmul(instance_embeddings, scored_rows(rows, config), transpose_b=True)
  return config.logit_scale * scores if normalizes(config) else scores


def bag_keys(examples) -> tf.Tensor:
  """The sorted distinct bag rows a client's ((ids, values), labels) examples
  read, padding row 0 first: the rows of the bag it needs, [None] int32."""
  ids = tf.reshape(examples[0][0], [-1])
  return tf.sort(tf.unique(tf.concat([tf.zeros([1], ids.dtype), ids], 0))[0])


def localize_features(batch, keys: tf.Tensor):
  """The batch with each feature id replaced by its position among `keys`
  (sorted, holding every id of the batch, 0 first): the tower then reads the
  client's bag rows, and padding stays position 0."""
  (feature_ids, feature_values), labels = batch
  positions = tf.searchsorted(keys, tf.reshape(feature_ids, [-1]), out_type=tf.int32)
  return (tf.reshape(positions, tf.shape(feature_ids)), feature_values), labels


class _XCLayer(tf.keras.layers.Layer):
  """A layer built from an `XCEncoderConfig` and a seed (and saved with them)."""

  def __init__(self, config: XCEncoderConfig, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self._config = config
    self._seed = seed

  def get_config(self):
    return {**super().get_config(), "encoder_config": dataclasses.asdict(self._config),
            "seed": self._seed}

  @classmethod
  def from_config(cls, config):
    encoder = dict(config.pop("encoder_config"))
    encoder["hidden_dims"] = tuple(encoder["hidden_dims"])
    return cls(XCEncoderConfig(**encoder), **config)


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class InstanceTower(_XCLayer):
  """The tower as a Keras layer over `tower_forward` (weights in its order)."""

  def build(self, input_shape):
    initial = initial_tower_weights(self._config, self._seed)
    self.tower_weights = [
        self.add_weight(name=f"w{i}", shape=w.shape,
                        initializer=tf.constant_initializer(w))
        for i, w in enumerate(initial)]
    super().build(input_shape)

  def call(self, inputs):
    feature_ids, feature_values = inputs
    return tower_forward(self.tower_weights, feature_ids, feature_values,
                         self._config.residual, normalizes(self._config))


@tf.keras.utils.register_keras_serializable(package="fed_retrieval")
class ClassTable(_XCLayer):
  """The class embeddings [C, D]; scores instance embeddings against all of them."""

  def build(self, input_shape):
    self.table = self.add_weight(
        name="class_table", shape=(self._config.num_labels, self._config.embedding_dim),
        initializer=tf.constant_initializer(initial_class_table(self._config, self._seed)))
    super().build(input_shape)

  def call(self, instance_embeddings):
    return class_logits(instance_embeddings, self.table, self._config)

  def scored_table(self) -> tf.Tensor:
    """The rows as instances are scored against them (`scored_rows`)."""
    return scored_rows(self.table, self._config)


def build_xc_classifier(config: XCEncoderConfig, seed: int = 0) -> tf.keras.Model:
  """(feature_ids, feature_values) -> logits over all classes [B, C].

  Trainable weights: the tower's (in `tower_forward` order), then the class table.
  """
  feature_ids = tf.keras.Input(shape=(None,), dtype=tf.int32, name="feature_ids")
  feature_values = tf.keras.Input(shape=(None,), dtype=tf.float32, name="feature_values")
  embeddings = InstanceTower(config, seed, name="instance_tower")(
      (feature_ids, feature_values))
  logits = ClassTable(config, seed, name="class_table")(embeddings)
  return tf.keras.Model((feature_ids, feature_values), logits, name="xc_classifier")


def instance_tower(model: tf.keras.Model) -> tf.keras.Model:
  """The sub-model of `build_xc_classifier` that embeds instances."""
  return tf.keras.Model(model.inputs, model.get_layer("instance_tower").output)


def class_table(model: tf.keras.Model) -> tf.Variable:
  return model.get_layer("class_table").table


def scored_class_table(model: tf.keras.Model) -> tf.Tensor:
  """The class table as `model` scores instance embeddings against it: the
  top classes of an embedding are the rows of its largest dot products."""
  return model.get_layer("class_table").scored_table()
