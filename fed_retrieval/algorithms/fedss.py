"""FedSS (paper 003, Algorithm 1): federated sampled softmax.

Every client, every round, forms a fixed-size key set: its positives (the
distinct classes of its data, sorted, padded to `positives_per_client` by
repeating the first) and `num_negatives` classes sampled uniformly without replacement
from the classes that are not its positives. The sample is a function of
(seed, round, client): the client is identified by a hash of its sorted
positives, so it needs no id from the server and a resumed run draws the same
negatives. The client receives the tower and only those rows
(`sub_model.build_sub_model_process`), trains a softmax over its candidate
set (`losses/sampled_softmax.py`), and returns the tower delta and row deltas;
the server averages rows over the clients that held them.

Algorithms (the paper's Sec. 4.1): `fedss` (logits over P_k U N_k), `neg_only`
({y} U N_k), `pos_only` (P_k; no negatives are downloaded) and `full_softmax`
(every class: the whole table is broadcast; the reference).

Two model families: the XC classifier (classes are labels), and the MovieLens
dual encoder (classes are items; the key set's positives are every item the
client's examples touch, contexts and labels, so only those rows travel:
sampled global softmax, `build_movielens_process`).
"""

import dataclasses
from typing import Optional, Tuple

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms import sub_model
from fed_retrieval.algorithms.differential_privacy import ClientDP
from fed_retrieval.models import dual_encoder
from fed_retrieval.models import scoring
from fed_retrieval.models import xc_encoder
from fed_retrieval.models.xc_encoder import XCEncoderConfig
from losses import sampled_softmax

ALGORITHMS = ("fedss", "neg_only", "pos_only", "full_softmax")
CANDIDATE_SET = {"fedss": "sampled_softmax", "neg_only": "neg_only",
                 "pos_only": "pos_only", "full_softmax": "full_softmax"}


@dataclasses.dataclass(frozen=True)
class FedSSConfig:
  """Hyper-parameters of FedSS and its baselines (names follow the flags).

  Client SGD at 0.05 (the paper's 0.01 order); server Adam at 0.03 on the
  tower (FedAwS's); rows take FedAvg's mean over the round's clients
  (`row_mean=clients`). Chosen on real Bibtex and Delicious (5 labels per
  client, README): the mean over a row's holders let a row that one client
  sampled as a negative take that client's whole push, and on Delicious
  (983 labels, 189 clients) validation P@1 swung 4, 19, 26, 38, 16, 26, 30;
  over the round's clients it rose 36, 37, 34, 36, 37, 41, 43 (Bibtex: 56.0
  test P@1 against 56.8, within noise). Not the paper's server SGD with
  momentum 0.9 at 1.0: the tower's embedding bag is sparse, and the mean over
  100 clients divides a feature row's delta by the ~100 clients that did not
  touch it; Adam normalizes that away (as for FedAwS; on xc_10k, small
  tower, after 20 rounds: 0.20% with SGDm 1.0, 0.73% with Adam 0.03, 2.43%
  with Adam 0.1).
  The rows' mean delta is applied at `row_learning_rate` 30 (FedAvg's: 1):
  the mean over the round's clients shrinks a row's step to its holders'
  share of the round; at rate 1 Delicious's class table (57 clients a round)
  barely left its initialization and full softmax stayed at the most
  frequent labels' P@1, even on an IID split. Bibtex (10 clients a round) is
  flat from 1 to 50 (README).
  Negatives: `num_negatives` if given, else `negative_fraction` (5%, the
  paper's largest sample) of the classes: 100 of xc_small's 2,000, 8 of
  Bibtex's 159, 198 of ML-1M's 3,952 items (`for_classes`).
  `log_q`: FedSS's logits carry paper 003's sampled-softmax correction (eq.
  3), so each sampled negative stands for the classes it was drawn from and
  a client's own classes weigh in the softmax as in the full one. Measured
  on Bibtex and Delicious (README): +0.93 ± 0.37 and -0.90 ± 0.70 test P@1
  on labels that share points (10 seeds), -0.27 ± 1.31 and +2.96 ± 0.65 on k
  labels a client (5 seeds); -0.53 ± 0.38 on the synthetic xc_small (3
  seeds). MovieLens keeps it off (not measured on items).
  """
  algorithm: str = "fedss"
  num_negatives: Optional[int] = None
  negative_fraction: float = 0.05
  log_q: bool = True
  client_learning_rate: float = 0.05
  server_optimizer: str = "adam"
  server_learning_rate: float = 0.03
  row_mean: str = "clients"
  row_learning_rate: float = 30.0
  positives_per_client: int = 1

  def __post_init__(self):
    if self.algorithm not in ALGORITHMS:
      raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)} for "
                       f"FedSS, got '{self.algorithm}'")
    if (self.num_negatives is not None and self.num_negatives < 1 and
        self.algorithm in ("fedss", "neg_only")):
      raise ValueError(f"--num_negatives must be >= 1, got {self.num_negatives}")
    if not 0 < self.negative_fraction < 1:
      raise ValueError(f"--negative_fraction must be in (0, 1), got "
                       f"{self.negative_fraction}")
    if not self.row_learning_rate > 0:
      raise ValueError(f"--row_learning_rate must be > 0, got {self.row_learning_rate}")
    if self.positives_per_client < 1:
      raise ValueError("positives_per_client must be >= 1, got "
                       f"{self.positives_per_client}")

  def for_classes(self, num_classes: int) -> "FedSSConfig":
    """The config with its number of negatives fixed for `num_classes` classes."""
    if self.num_negatives is not None:
      return self
    return dataclasses.replace(
        self, num_negatives=max(1, round(self.negative_fraction * num_classes)))

  @property
  def candidate_set(self) -> str:
    return CANDIDATE_SET[self.algorithm]

  @property
  def negatives(self) -> int:
    """Sampled negatives per client (none for pos_only and full_softmax)."""
    if self.algorithm not in ("fedss", "neg_only"):
      return 0
    if self.num_negatives is None:
      raise ValueError("FedSSConfig: call for_classes() to fix the negatives")
    return self.num_negatives

  def num_keys(self, num_classes: int) -> int:
    if self.algorithm == "full_softmax":
      return num_classes
    return self.positives_per_client + self.negatives

  def check_classes(self, num_classes: int, reserved: int = 0) -> None:
    available = num_classes - reserved - self.positives_per_client
    if self.negatives > available:
      raise ValueError(f"--num_negatives={self.negatives} exceeds the {available} "
                       "classes a client with the most positives can sample")


def client_fingerprint(positive_ids: tf.Tensor) -> tf.Tensor:
  """An int64 that names a client by its distinct sorted positives."""
  text = tf.strings.reduce_join(tf.strings.as_string(positive_ids),
                                separator=",")
  return tf.strings.to_hash_bucket_fast(text, 2 ** 62)


def sample_key_set(positive_ids: tf.Tensor, positive_slots: int, num_classes: int,
                   num_negatives: int, round_seed: tf.Tensor,
                   reserved_ids: Tuple[int, ...] = ()) -> Tuple[tf.Tensor, tf.Tensor]:
  """(keys [P + N], is_real [P + N]) of one client.

  Keys: the distinct `positive_ids`, sorted (so the set does not depend on the
  order of the client's shuffled data) and padded to `positive_slots` by
  repeating the first, then `num_negatives` distinct classes drawn uniformly
  from those neither positive nor reserved (MovieLens: item 0, padding), in
  O(num_negatives) (`draw_distinct`, `skip_excluded`). The draw is seeded by
  `round_seed` (seed, round) folded with the client's fingerprint.
  """
  distinct = tf.sort(tf.unique(tf.reshape(positive_ids, [-1]))[0])
  check = tf.debugging.assert_less_equal(tf.size(distinct), positive_slots, message=(
      "a client has more distinct positives than its key set's positive slots"))
  with tf.control_dependencies([check]):
    count = tf.size(distinct)
  padded = tf.concat([distinct, tf.fill([positive_slots], distinct[0])], 0)
  positives = tf.reshape(padded[:positive_slots], [positive_slots])
  is_real = tf.range(positive_slots) < count
  if num_negatives == 0:
    return positives, is_real
  seed = tf.random.experimental.stateless_fold_in(
      tf.cast(round_seed, tf.int64), client_fingerprint(distinct))
  excluded = tf.sort(tf.unique(
      tf.concat([distinct, tf.constant(reserved_ids, tf.int32)], 0))[0])
  ranks = draw_distinct(num_negatives, num_classes - tf.size(excluded), seed)
  negatives = skip_excluded(ranks, excluded)
  return (tf.concat([positives, negatives], 0),
          tf.concat([is_real, tf.ones([num_negatives], tf.bool)], 0))


def draw_distinct(count: int, population: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
  """`count` distinct integers drawn uniformly from [0, population), [count] int32.

  The first `count` distinct values of a stream of seeded uniform draws (chunks
  of 2 * count + 16, the i-th seeded by `seed` folded with i): O(count) work
  when count is small against the population, instead of a top-k over all of
  it. Every ordered sample of distinct values is equally likely, so the set is
  a uniform sample without replacement. Needs count <= population.
  """
  chunk = 2 * count + 16
  population = tf.cast(population, tf.int64)

  def more(drawn, i):
    values = tf.random.stateless_uniform(
        [chunk], tf.random.experimental.stateless_fold_in(seed, i), minval=0,
        maxval=population, dtype=tf.int64)
    return tf.unique(tf.concat([drawn, values], 0))[0], i + 1

  drawn, _ = tf.while_loop(
      lambda drawn, i: tf.size(drawn) < count, more,
      (tf.zeros([0], tf.int64), tf.constant(0, tf.int64)),
      shape_invariants=(tf.TensorShape([None]), tf.TensorShape([])))
  return tf.reshape(tf.cast(drawn[:count], tf.int32), [count])


def skip_excluded(ranks: tf.Tensor, excluded: tf.Tensor) -> tf.Tensor:
  """The ids of `ranks` among the ids that are not `excluded` (sorted, distinct).

  The r-th allowed id is r plus the number of excluded ids at or below it:
  excluded id e_i has e_i - i allowed ids below it, so a binary search over
  those counts finds it in O(log |excluded|).
  """
  allowed_below = excluded - tf.range(tf.size(excluded), dtype=excluded.dtype)
  return ranks + tf.searchsorted(allowed_below, ranks, side="right",
                                 out_type=ranks.dtype)


def candidate_loss(logits: tf.Tensor, label_positions: tf.Tensor, is_real: tf.Tensor,
                   config: FedSSConfig, num_classes: int,
                   is_other_label: Optional[tf.Tensor] = None) -> tf.Tensor:
  """The config's softmax over a client's candidate keys, from the logits
  [B, K] of its examples against its key rows; `is_other_label` [B, K]: keys
  that are other labels of an example's point, never its negatives."""
  slots = config.positives_per_client
  if config.algorithm == "full_softmax":
    is_positive, is_negative = is_real, tf.zeros_like(is_real)
  else:
    in_positive_slots = tf.range(tf.shape(is_real)[0]) < slots
    is_positive = is_real & in_positive_slots
    is_negative = is_real & ~in_positive_slots
  mask = sampled_softmax.candidate_mask(label_positions, is_positive, is_negative,
                                        config.candidate_set)
  if is_other_label is not None:
    mask &= ~is_other_label
  log_q = None
  if config.log_q and config.algorithm == "fedss":
    log_q = sampled_softmax.log_q_correction(
        is_negative, config.negatives, num_classes,
        tf.reduce_sum(tf.cast(is_positive, tf.int32)))
  return sampled_softmax.candidate_softmax_loss(logits, label_positions, mask, log_q)


def bytes_per_client(tower_shapes, num_classes: int, dim: int, config: FedSSConfig,
                     bag_rows: Optional[float] = None,
                     positives: Optional[float] = None) -> Tuple[float, float]:
  """(download, upload) bytes of one client in one round: `bag_rows` bag rows
  (None: the whole bag) and `positives` real positives (None: every slot)."""
  config = config.for_classes(num_classes)
  full = config.algorithm == "full_softmax"
  keys = config.num_keys(num_classes)
  if positives is not None and not full:
    keys = positives + config.negatives
  return sub_model.bytes_per_client(tower_shapes, keys, dim, whole_table=full,
                                    bag_rows=None if full else bag_rows)


def build_xc_process(model_config: XCEncoderConfig, config: FedSSConfig,
                     max_features: int, seed: int = 0, bag: str = "selected",
                     dp: Optional[ClientDP] = None, sharded: bool = False,
                     other_labels: int = 0) -> sub_model.SubModelProcess:
  """FedSS or a baseline on the XC classifier (tower + class table); `bag`:
  how clients receive the tower's embedding bag (full softmax: whole); `dp`:
  of the dense tower (full softmax: of the whole model); `sharded`: `next`
  takes shards of clients; `other_labels`: of the batches
  (`fedaws.xc_batch_type`): a key that is another label of an example's point
  is left out of its softmax, as paper 003's single-label data never needs."""
  num_classes = model_config.num_labels
  config = config.for_classes(num_classes)
  config.check_classes(num_classes)
  selected = fedaws.selected_bag(bag)

  def client_keys(examples, round_seed):
    return sample_key_set(fedaws.own_labels(examples[1]), config.positives_per_client,
                          num_classes, config.negatives, round_seed)

  def loss(tower, rows, keys, is_real, batch):
    (feature_ids, feature_values), labels = batch
    embeddings = xc_encoder.tower_forward(tower, feature_ids, feature_values,
                                            model_config.residual,
                                            xc_encoder.normalizes(model_config))
    is_other_label = None
    if labels.shape.rank == 2:  # [B, K]: a key among the point's other labels.
      is_other_label = tf.reduce_any(
          tf.equal(labels[:, 1:, None], keys[None, None, :]), axis=1)
    return candidate_loss(xc_encoder.class_logits(embeddings, rows, model_config),
                          fedaws.positions_in(fedaws.own_labels(labels), keys), is_real,
                          config, num_classes, is_other_label)

  return _build_process(
      config, seed, num_classes, client_keys, loss,
      initial_tower=xc_encoder.initial_tower_weights(model_config, seed),
      initial_table=xc_encoder.initial_class_table(model_config, seed),
      batch_type=fedaws.xc_batch_type(max_features, other_labels),
      bag=None if config.algorithm == "full_softmax" else selected, dp=dp,
      sharded=sharded)


def _build_process(config: FedSSConfig, seed: int, num_classes: int, client_keys,
                   loss, **model_parts) -> sub_model.SubModelProcess:
  """The sub-model process of `config.algorithm`: full softmax holds the whole
  table (no key function); the others hold their sampled key sets."""
  full = config.algorithm == "full_softmax"
  return sub_model.build_sub_model_process(sub_model.SubModelSpec(
      num_keys=config.num_keys(num_classes), client_keys=None if full else client_keys,
      loss=loss, client_learning_rate=config.client_learning_rate,
      server_optimizer=config.server_optimizer,
      server_learning_rate=config.server_learning_rate, whole_table=full,
      row_mean=config.row_mean, row_learning_rate=config.row_learning_rate, seed=seed,
      **model_parts))


def _movielens_items(examples) -> tf.Tensor:
  """Every item id a client's (context, label) examples touch, padding included."""
  context, label = examples
  return tf.concat([tf.reshape(context, [-1]), label], 0)


def build_movielens_process(model_config: dual_encoder.DualEncoderConfig,
                            config: FedSSConfig, temperature: float, seed: int = 0,
                            sharded: bool = False) -> sub_model.SubModelProcess:
  """Sampled (or full) global softmax of the dual encoder: items are classes.

  The dual encoder must have no hidden layers (the paper's: the item table is
  the whole model, shared by both towers), so the process has no tower.
  Logits are cos / temperature, as in global softmax.
  """
  if model_config.context_hidden_dims or model_config.item_hidden_dims:
    raise ValueError("FedSS on MovieLens needs a dual encoder without hidden layers "
                     "(--context_hidden_dims/--item_hidden_dims empty)")
  if not model_config.normalize:
    raise ValueError("FedSS scores cosines: the dual encoder must normalize")
  num_items = model_config.vocabulary_size
  config = config.for_classes(num_items - 1)  # Item 0 pads.
  config.check_classes(num_items, reserved=1)

  def client_keys(examples, round_seed):
    items = _movielens_items(examples)
    return sample_key_set(tf.boolean_mask(items, items > 0), config.positives_per_client,
                          num_items, config.negatives, round_seed, reserved_ids=(0,))

  def loss(tower, rows, keys, is_real, batch):
    del tower
    context, labels = batch
    context_rows = tf.gather(rows, fedaws.positions_in(tf.reshape(context, [-1]), keys))
    context_rows = tf.reshape(context_rows, [tf.shape(context)[0], -1, tf.shape(rows)[1]])
    queries = scoring.l2_normalize(dual_encoder.MaskedMean()([context_rows, context]))
    not_padding = is_real & (keys > 0)  # Full softmax holds row 0, the padding.
    logits = tf.matmul(queries, scoring.l2_normalize(rows), transpose_b=True) / temperature
    return candidate_loss(logits, fedaws.positions_in(labels, keys), not_padding, config,
                          num_items)

  initializer = np.random.default_rng([seed, 13])
  table = (0.1 * initializer.standard_normal(
      (num_items, model_config.embedding_dim))).astype(np.float32)
  return _build_process(
      config, seed, num_items, client_keys, loss, initial_tower=[], initial_table=table,
      batch_type=(tff.TensorType(np.int32, [None, model_config.max_context_length]),
                  tff.TensorType(np.int32, [None])),
      table_first=True, sharded=sharded)
