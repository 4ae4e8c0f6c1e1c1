"""FedAwS (paper 000, Algorithm 1): positive-only clients, server spreadout.

A round, for clients that each hold the points of their own class(es):
1. Every client computes its keys, the distinct labels of its data (padded to
   `rows_per_client` by repeating the first), and receives the instance tower
   and *only those rows* of the class table (`tff.federated_select`).
2. It runs SGD on the positive squared hinge max(0, margin - cos(g(x), w_y))^2
   (eq. 23) over its data, and returns the tower delta, its row deltas and keys.
3. The server adds the example-weighted mean tower delta (times the server
   learning rate), adds to each row the mean delta of the clients that held it
   (rows nobody held are untouched), and then takes the spreadout step on the
   updated classes (losses/class_spreadout.py) with learning rate lambda * eta.

The same builder gives two baselines of the paper: `positive_only` (no
spreadout step: the embeddings collapse) and `fixed_class_embeddings` (rows
downloaded but never trained or uploaded). The third, `softmax_oracle` (full
softmax, the whole table sent to every client), is FedSS's `full_softmax` at
FedAwS's client and server rates (`tasks.xc.family.algorithm_config`): one
whole-table process for both papers, whose rows take their mean delta at
FedSS's row rate rather than a server-Adam step (on Delicious the Adam-stepped
table collapsed: mean class cosine 0.59, test P@5 32.6, below the most
frequent labels' 35.4).

The process is `sub_model.build_sub_model_process` (shared with FedSS); its
model weights are the tower's weights then the class table, in the order of
`xc_encoder.build_xc_classifier`'s trainable variables.
"""

import dataclasses
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import class_neighbours
from fed_retrieval.algorithms import row_ids
from fed_retrieval.algorithms import sub_model
from fed_retrieval.algorithms.differential_privacy import ClientDP
from fed_retrieval.models import scoring
from fed_retrieval.models import xc_encoder
from fed_retrieval.models.xc_encoder import XCEncoderConfig
from losses import class_spreadout

# The algorithms `build_fedaws_process` builds; the family's third baseline,
# the oracle, is FedSS's full softmax (module docstring).
OWN_ALGORITHMS = ("fedaws", "positive_only", "fixed_class_embeddings")
ORACLE = "softmax_oracle"
ALGORITHMS = OWN_ALGORITHMS + (ORACLE,)
# How a client receives the tower's embedding bag: only the rows of its
# features (the default), or the whole bag (the contrast).
BAGS = ("selected", "whole")


def check_bag(bag: str) -> None:
  if bag not in BAGS:
    raise ValueError(f"--xc_bag must be one of {', '.join(BAGS)}, got '{bag}'")


def selected_bag(bag: str) -> Optional[sub_model.SelectedBag]:
  """The XC tower's bag as a selected table, or None when it goes whole."""
  check_bag(bag)
  if bag == "whole":
    return None
  return sub_model.SelectedBag(keys=xc_encoder.bag_keys,
                               localize=xc_encoder.localize_features)


@dataclasses.dataclass(frozen=True)
class FedAwSConfig:
  """Hyper-parameters of FedAwS and its baselines (names follow the flags).

  Defaults: the paper's k 10 and client SGD as in Algorithm 1; the averaged
  tower delta goes through server Adam (plain averaging, server SGD at 1.0,
  learned nothing in 30 rounds here). lambda is 0.1, not the paper's 10: the
  step is lambda * eta times the gradient of a sum over k neighbours of unit
  rows (up to 2k per row), and at eta 0.2 lambda 10 moves a row by ~40 units
  a round; validation P@1 after 60 rounds on xc_small was 0.13 / 0.35 / 0.46
  at lambda 10 / 0.5 / 0.1 (README).
  """
  algorithm: str = "fedaws"
  client_learning_rate: float = 0.2
  server_optimizer: str = "adam"
  server_learning_rate: float = 0.03
  hinge_margin: float = 0.9
  spreadout: str = "topk"
  spreadout_k: int = 10
  spreadout_lambda: float = 0.1
  spreadout_margin: float = 1.0
  # How topk finds each class's neighbours (`class_neighbours.SEARCHES`).
  spreadout_search: str = "exact"
  rows_per_client: int = 1

  def __post_init__(self):
    if self.algorithm not in ALGORITHMS:
      raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)} for the "
                       f"XC task, got '{self.algorithm}'")
    if self.spreadout not in class_spreadout.SPREADOUT_MODES:
      raise ValueError(f"--spreadout must be one of "
                       f"{', '.join(class_spreadout.SPREADOUT_MODES)}, got "
                       f"'{self.spreadout}'")
    class_neighbours.check_search(self.spreadout_search)
    for name in ("spreadout_k", "rows_per_client"):
      if getattr(self, name) < 1:
        raise ValueError(f"--{name} must be >= 1, got {getattr(self, name)}")

  @property
  def trains_rows(self) -> bool:
    return self.algorithm != "fixed_class_embeddings"

  @property
  def spreads_out(self) -> bool:
    return self.algorithm == "fedaws"


def require_cosines(scoring: Optional[str], algorithm: str) -> None:
  """Refuses any scoring but cosines (None): the hinge and the spreadout are
  on them."""
  if scoring not in (None, "cosine"):
    raise ValueError(f"--xc_scoring={scoring}: --algorithm={algorithm} "
                     "trains on cosines (its hinge and spreadout); use "
                     "--xc_scoring=cosine, or FedSS's family")


def client_keys(labels: tf.Tensor, rows_per_client: int) -> Tuple[tf.Tensor, tf.Tensor]:
  """(keys [R], is_real [R]): the distinct labels, padded by repeating the first."""
  distinct, _ = tf.unique(labels)
  count = tf.minimum(tf.size(distinct), rows_per_client)
  padded = tf.concat([distinct, tf.fill([rows_per_client], distinct[0])], 0)
  return (tf.reshape(padded[:rows_per_client], [rows_per_client]),
          tf.range(rows_per_client) < count)


def positions_in(labels: tf.Tensor, keys: tf.Tensor) -> tf.Tensor:
  """The position of each label among the keys (the first, if repeated)."""
  return tf.argmax(tf.cast(tf.equal(labels[:, None], keys[None, :]), tf.int32),
                   axis=1, output_type=tf.int32)


def positive_hinge_loss(instance_embeddings: tf.Tensor, rows: tf.Tensor,
                        positions: tf.Tensor, margin: float) -> tf.Tensor:
  """Mean of max(0, margin - cos(instance, its class row))^2 (eq. 23).

  The client's candidate set is the rows it holds; each instance is scored
  against its own row (`positions`: the row of its label).
  """
  cosine = scoring.candidate_scores(instance_embeddings, scoring.l2_normalize(rows),
                                    positions[:, None])[:, 0]
  return tf.reduce_mean(tf.square(tf.maximum(margin - cosine, 0.0)))


def xc_batch_type(max_features: int, other_labels: int = 0):
  """TFF type of an XC batch: ((feature ids, values) [B, F], labels): labels
  [B], or [B, 1 + other_labels] where clients hold several labels (the
  example's own, then its point's other labels its client holds, -1 padded;
  `xc_task.other_held_labels`)."""
  labels = [None] if not other_labels else [None, 1 + other_labels]
  return ((tff.TensorType(np.int32, [None, max_features]),
           tff.TensorType(np.float32, [None, max_features])),
          tff.TensorType(np.int32, labels))


def own_labels(labels: tf.Tensor) -> tf.Tensor:
  """[B] each example's own label, from labels of `xc_batch_type`."""
  return labels if labels.shape.rank == 1 else labels[:, 0]


def bytes_per_client(model_config: XCEncoderConfig, config: FedAwSConfig,
                     bag_rows: Optional[float] = None, class_rows: Optional[float] = None
                     ) -> Tuple[float, float]:
  """(download, upload) bytes of one client in one round, from the shapes:
  `bag_rows` bag rows (None: the whole bag) and `class_rows` class rows (None:
  the key set's `rows_per_client`)."""
  return sub_model.bytes_per_client(
      model_config.weight_shapes(),
      config.rows_per_client if class_rows is None else class_rows,
      model_config.embedding_dim, config.trains_rows, bag_rows=bag_rows)


def spreadout_step(config: FedAwSConfig, initial_table: np.ndarray,
                   seed: int) -> sub_model.TableStepFn:
  """FedAwS's server spreadout on the updated classes (learning rate lambda *
  eta), as the sub-model process's table step. With an exact search, one TF
  graph; with an approximate one (`class_neighbours`), the neighbours come
  from an inverted file kept across rounds (its lists on the shards of
  `class_neighbours.use_remote_shards`, if any)."""
  rate = config.spreadout_lambda * config.client_learning_rate
  num_rows, dim = initial_table.shape
  if config.spreadout == "all" or config.spreadout_search == "exact":
    exact = tf.function(lambda table, updated: class_spreadout.spreadout_step(
        table, updated, rate, config.spreadout, config.spreadout_k,
        config.spreadout_margin), input_signature=[
            tf.TensorSpec([num_rows, dim], tf.float32), tf.TensorSpec([None], tf.int32)])
    return lambda before, table, updated: exact(table, updated).numpy()
  k = min(config.spreadout_k, num_rows - 1)
  index = class_neighbours.ApproximateNeighbours(
      initial_table, seed, shards=class_neighbours.remote_shards())
  given = tf.function(lambda rows, updated, neighbours: class_spreadout.topk_step(
      rows, updated, neighbours, rate), input_signature=[
          tf.TensorSpec([None, dim], tf.float32), tf.TensorSpec([None], tf.int32),
          tf.TensorSpec([None, k], tf.int32)])

  def approximate(before, table, updated):
    # Only the updated rows and their neighbours move: the step runs on those
    # rows and writes them back into the round's table, O(rows moved) and not
    # O(C) (at 670k classes, the table's copies into TF and back were most of
    # a 100-client round's server step). The new rows are read as a view of
    # the step's tensor (`.numpy()` would copy them) and handed to the index
    # as they are, not read back from the table.
    neighbours = index.nearest(before, table, updated, updated, k)
    rows, lookup = row_ids.distinct_and_lookup(
        np.concatenate([updated, neighbours.ravel()]), num_rows)
    moved = np.asarray(given(np.take(table, rows, axis=0), lookup[updated],
                             lookup[neighbours]))
    row_ids.put_rows(table, rows, moved)
    index.moved(table, rows, moved)
    return table

  return approximate


def build_fedaws_process(model_config: XCEncoderConfig, config: FedAwSConfig,
                         max_features: int, seed: int = 0, bag: str = "selected",
                         dp: Optional[ClientDP] = None, sharded: bool = False,
                         other_labels: int = 0) -> sub_model.SubModelProcess:
  """FedAwS, `positive_only` or `fixed_class_embeddings` as a sub-model process
  (`bag`: how clients receive the tower's embedding bag, `BAGS`; `dp`: of the
  dense tower; `sharded`: `next` takes shards of clients; `other_labels`: of
  the batches, `xc_batch_type`; each instance is pulled to its own row only)."""
  if config.algorithm not in OWN_ALGORITHMS:
    raise ValueError(f"{config.algorithm} is FedSS's full softmax "
                     "(tasks.xc.family.algorithm_config builds it)")
  require_cosines(model_config.scoring, config.algorithm)

  def loss(tower, rows, keys, is_real, batch):
    del is_real  # Every label of the client is among its keys.
    (feature_ids, feature_values), labels = batch
    embeddings = xc_encoder.tower_forward(tower, feature_ids, feature_values,
                                            model_config.residual)
    return positive_hinge_loss(embeddings, rows, positions_in(own_labels(labels), keys),
                               config.hinge_margin)

  initial_table = xc_encoder.initial_class_table(model_config, seed)
  return sub_model.build_sub_model_process(sub_model.SubModelSpec(
      initial_tower=xc_encoder.initial_tower_weights(model_config, seed),
      initial_table=initial_table,
      batch_type=xc_batch_type(max_features, other_labels),
      num_keys=config.rows_per_client,
      client_keys=lambda examples, _: client_keys(own_labels(examples[1]),
                                                  config.rows_per_client),
      loss=loss,
      client_learning_rate=config.client_learning_rate,
      server_optimizer=config.server_optimizer,
      server_learning_rate=config.server_learning_rate,
      trains_rows=config.trains_rows,
      table_step=spreadout_step(config, initial_table, seed) if config.spreads_out else None,
      bag=selected_bag(bag),
      seed=seed, dp=dp, sharded=sharded))
