"""Points -> `tf.data` pipelines: one dataset per client, and all examples.

MovieLens elements are `(context, label)`: an int32 vector of
`max_context_length` item ids and an int32 item id, batched as `([B, L], [B])`,
or `((context, label), label)` for a model that scores the batch's positives
(`positives_as_input`, `dual_encoder.batch_candidates_model`); XC elements are
`((feature_ids, feature_values), label)`.
Batching keeps the short last batch: no example is silently dropped.
"""

from typing import Any, Dict, NamedTuple, Optional, Sequence

import numpy as np
import tensorflow as tf

from tasks import seed_sequences
from tasks.movielens.sequence_examples import Examples


def _inputs(examples: Examples, positives_as_input: bool):
  contexts = examples.contexts.astype(np.int32)
  return (contexts, examples.labels.astype(np.int32)) if positives_as_input else contexts


class Shard(NamedTuple):
  """Several clients' batches of a round, one client after another, as arrays:
  what a sharded process's TFF client takes, FedAvg's (`algorithms.client_shards`)
  as a dataset of this one element (`ClientDatasets.shard_dataset`: TFF's
  learning templates take sequences), a sub-model process's as the arrays
  themselves (`shard_arrays`); a while loop slices each batch, with no
  dataset element to fetch per batch.

  `examples`: (inputs, labels) of the rows trained on, in order (a row once
  per epoch); batch b is rows `batch_ends[b - 1]:batch_ends[b]` (from 0 for
  b = 0); `starts_client[b]`: batch b is its client's first. Every batch of a
  client but its last is full (its epochs are batched as one sequence).
  """
  # Fields in sorted order: TFF serializes a dataset of named elements only so.
  batch_ends: np.ndarray  # int32 [batches]
  examples: Any
  starts_client: np.ndarray  # bool [batches]


def shard_spec(example_spec) -> Shard:
  """The `tf.TensorSpec`s of a `Shard` of examples of `example_spec` (a batch's
  specs, the leading dimension None)."""
  return Shard(batch_ends=tf.TensorSpec([None], tf.int32), examples=example_spec,
               starts_client=tf.TensorSpec([None], tf.bool))


def read_shard(dataset: tf.data.Dataset) -> Shard:
  """The `Shard` a shard dataset holds (in a TF graph)."""
  return Shard(*dataset.get_single_element())


def shard_arrays(dataset: tf.data.Dataset) -> Shard:
  """The `Shard` a shard dataset holds, as NumPy arrays (read eagerly: 16
  shards of 250 clients at Amazon-670K's shape, 3-9 ms here)."""
  return tf.nest.map_structure(np.asarray, read_shard(dataset))


def shard_clients(shard: Shard) -> int:
  """How many clients a `Shard` of arrays holds."""
  return int(np.sum(shard.starts_client))


def shard_batch(shard: Shard, index: tf.Tensor, length: Optional[int] = None):
  """Batch `index` of a shard (in a TF graph). With `length`, the batch's
  known length (`checked_shard`): it is sliced with that static size, so the
  graph that trains on it knows its shapes."""
  end = shard.batch_ends[index]
  if length is not None:
    return tf.nest.map_structure(
        lambda t: tf.slice(t, [end - length] + [0] * (t.shape.rank - 1),
                           [length] + [-1] * (t.shape.rank - 1)), shard.examples)
  begin = tf.where(index > 0, shard.batch_ends[tf.maximum(index - 1, 0)], 0)
  return tf.nest.map_structure(lambda t: t[begin:end], shard.examples)


def checked_shard(shard: Shard, batch_size: int) -> Shard:
  """The shard, its batch ends read only once checked that every batch but
  each client's last holds `batch_size` examples and none more (in a TF
  graph; else it fails naming the batch size): what `shard_batch(...,
  length=batch_size)` relies on."""
  lengths = shard.batch_ends - tf.concat([[0], shard.batch_ends[:-1]], 0)
  is_last = tf.concat([shard.starts_client[1:], [True]], 0)
  # tf.equal, not `==`: under TFF's tracing `==` compares the tensors' identity.
  check = tf.debugging.assert_equal(
      tf.reduce_all(tf.where(is_last, tf.less_equal(lengths, batch_size),
                             tf.equal(lengths, batch_size))),
      True, message=f"a shard's batches are not of the batch size {batch_size} "
                    "(every one but each client's last full)")
  with tf.control_dependencies([check]):
    return shard._replace(batch_ends=tf.identity(shard.batch_ends))


def shard_client_batches(shard: Shard) -> tf.Tensor:
  """[clients + 1]: client i's batches of a shard are bounds[i]:bounds[i + 1]
  (in a TF graph)."""
  starts = tf.cast(tf.where(shard.starts_client)[:, 0], tf.int32)
  return tf.concat([starts, tf.size(shard.batch_ends)[None]], 0)


def shard_client_bounds(shard: Shard) -> tf.Tensor:
  """[clients + 1]: client i's rows of `shard.examples` are bounds[i]:bounds[i + 1]
  (its batches are consecutive)."""
  batch_begins = tf.concat([[0], shard.batch_ends[:-1]], 0)
  return tf.concat([tf.boolean_mask(batch_begins, shard.starts_client),
                    shard.batch_ends[-1:]], 0)


class ClientDatasets:
  """Clients (string ids) and their training batches, for any task family.

  `inputs` is one array or a tuple of arrays with a row per point, `labels` a
  row per point, and `client_points` each client's point indices. A client's
  dataset is built from NumPy slices, shuffled in NumPy by its seed: no
  TensorFlow op runs per client in Python, which made building a round's 100
  client datasets through TFF's `ClientData` take 0.54 s (0.16 s with tf.data
  shuffling of NumPy slices, 0.05 s this way).
  """

  def __init__(self, inputs, labels: np.ndarray,
               client_points: Dict[str, np.ndarray]):
    self._inputs = inputs
    self._labels = labels
    self._points = client_points
    self.client_ids = sorted(client_points, key=_natural_order)

  @classmethod
  def from_examples(cls, examples: Examples,
                    positives_as_input: bool = False) -> "ClientDatasets":
    """One client per MovieLens user (id = the user id as a string)."""
    return cls(_inputs(examples, positives_as_input), examples.labels.astype(np.int32),
               {str(user): np.arange(start, stop)
                for user, (start, stop) in examples.user_ranges().items()})

  def points(self, client_id: str) -> np.ndarray:
    """The indices of the client's points."""
    return self._points[client_id]

  def num_examples(self, client_id: str) -> int:
    return len(self._points[client_id])

  @property
  def labels(self) -> np.ndarray:
    """The labels of every point, in point order."""
    return self._labels

  def pooled(self):
    """(inputs, labels) of every client's points, client after client: the
    same examples trained centrally."""
    return self._take(np.concatenate([self._points[c] for c in self.client_ids]))

  def _rows(self, client_id: str, batch_size: int, epochs: int,
            rng: Optional[np.random.Generator], max_steps: Optional[int]) -> np.ndarray:
    """The point indices a client trains on in a round, in order: each
    epoch's shuffled by `rng` (None: in their order)."""
    _check_batching(batch_size, epochs)
    if max_steps is not None and max_steps < 1:
      raise ValueError(f"--max_local_steps must be >= 1, got {max_steps}")
    if client_id not in self._points:
      raise KeyError(f"unknown client id {client_id}")
    points = self._points[client_id]
    rows = np.concatenate([points[rng.permutation(len(points))] if rng is not None else points
                           for _ in range(epochs)])
    return rows if max_steps is None else rows[:max_steps * batch_size]

  def _take(self, rows: np.ndarray):
    """(inputs, labels) of `rows`."""
    inputs = (tuple(a[rows] for a in self._inputs) if isinstance(self._inputs, tuple)
              else self._inputs[rows])
    return inputs, self._labels[rows]

  def training_dataset(self, client_id: str, batch_size: int, epochs: int = 1,
                       shuffle_seed: Optional[int] = None,
                       max_steps: Optional[int] = None) -> tf.data.Dataset:
    """`epochs` passes over the client's examples (each pass in its own order
    when seeded), batched, the short last batch kept; with `max_steps`, only
    the first that many batches (seeded, a client with more examples trains on
    a fresh sample of them for each seed)."""
    # One client: NumPy's own seeding (9 us; `seed_sequences` pays off only
    # over many clients, 140 us for one).
    rng = None if shuffle_seed is None else np.random.default_rng(shuffle_seed)
    rows = self._rows(client_id, batch_size, epochs, rng, max_steps)
    return tf.data.Dataset.from_tensor_slices(self._take(rows)).batch(batch_size)

  def shard_dataset(self, client_ids: Sequence[str], batch_size: int, epochs: int,
                    shuffle_seeds: Sequence[Optional[int]],
                    max_steps: Optional[int] = None) -> tf.data.Dataset:
    """A dataset of one `Shard`: the batches of several clients one client
    after another, client k's those of `training_dataset(client_ids[k], ...,
    shuffle_seeds[k], ...)`. (Each client's generator is seeded as
    `np.random.default_rng` would, all at once: `seed_sequences`.)"""
    row_lists = [self._rows(c, batch_size, epochs, rng, max_steps)
                 for c, rng in zip(client_ids, seed_sequences.generators(shuffle_seeds))]
    lengths = np.array([len(rows) for rows in row_lists], np.int64)
    batches = -(-lengths // batch_size)
    # Batch b's index within its client, its client's first row and length.
    within = np.arange(batches.sum()) - np.repeat(np.cumsum(batches) - batches, batches)
    first_row = np.repeat(np.cumsum(lengths) - lengths, batches)
    ends = first_row + np.minimum((within + 1) * batch_size, np.repeat(lengths, batches))
    return tf.data.Dataset.from_tensors(Shard(
        batch_ends=ends.astype(np.int32),
        examples=self._take(np.concatenate(row_lists)),
        starts_client=within == 0))


def _natural_order(client_id: str):
  return (0, int(client_id), "") if client_id.isdigit() else (1, 0, client_id)


def _check_batching(batch_size: int, epochs: int) -> None:
  if batch_size < 1:
    raise ValueError(f"--batch_size must be >= 1, got {batch_size}")
  if epochs < 1:
    raise ValueError(f"--local_epochs/--epochs must be >= 1, got {epochs}")


def _shuffled_rows(count: int, batch_size: int, shuffle_seed: Optional[int],
                   epochs: Optional[int]) -> tf.data.Dataset:
  """The row indices of each batch (int64 vectors): `epochs` passes over
  `count` rows (None: forever), each in its own seeded order when
  `shuffle_seed` is given, the short last batch of a pass kept."""
  _check_batching(batch_size, 1 if epochs is None else epochs)

  def one_pass(pass_num):
    order = _pass_order(count, shuffle_seed, pass_num)
    return tf.data.Dataset.range(0, count, batch_size).map(
        lambda start: order[start:start + batch_size])

  return _passes(epochs).flat_map(one_pass)


def _pass_order(count: int, shuffle_seed: Optional[int], pass_num: tf.Tensor) -> tf.Tensor:
  """The rows of pass `pass_num` in their order: seeded by the pass when
  `shuffle_seed` is given, else 0..count-1."""
  order = tf.range(count, dtype=tf.int64)
  if shuffle_seed is None:
    return order
  return tf.random.experimental.stateless_shuffle(
      order, seed=tf.stack([tf.constant(shuffle_seed, tf.int64), pass_num]))


def _passes(epochs: Optional[int]) -> tf.data.Dataset:
  return tf.data.Dataset.range(epochs if epochs else 2 ** 62)


def _row_count(arrays) -> int:
  return int(tf.nest.flatten(arrays)[0].shape[0])


def shuffled_batches(arrays, batch_size: int, shuffle_seed: Optional[int] = None,
                     epochs: Optional[int] = 1) -> tf.data.Dataset:
  """Batches of the rows of `arrays` (one array or a nested tuple of them, a
  row per example): `epochs` passes (None: forever), each in its own seeded
  order when `shuffle_seed` is given, the short last batch of a pass kept.

  Each batch is one gather of a slice of the pass's permutation from tensors
  already in memory: no per-example work in tf.data, which capped Keras `fit`
  at ~8k examples per second with an element-wise shuffle buffer.
  """
  tensors = tf.nest.map_structure(tf.constant, arrays)
  return _shuffled_rows(_row_count(arrays), batch_size, shuffle_seed, epochs).map(
      lambda rows: tf.nest.map_structure(lambda t: tf.gather(t, rows), tensors),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).prefetch(
          tf.data.AUTOTUNE)


def shuffled_chunks(arrays, batch_size: int, batches_per_epoch: int, chunk_size: int,
                    shuffle_seed: Optional[int] = None) -> tf.data.Dataset:
  """`shuffled_batches` forever (the same batches in the same order), in
  chunks of up to `chunk_size` consecutive batches: each element is
  (batches, lengths), every array of `arrays` with two leading dimensions
  [chunk, batch_size] (a short batch padded with copies of row 0) and each
  batch's true length [chunk]. A chunk never spans two runs of
  `batches_per_epoch` batches (a Keras epoch: an evaluation follows it).

  One element for many batches is what lets a training loop run at the pace of
  its step: fetching an element costs ~0.1 ms on this machine, as much as a
  whole batch-softmax step of 16 examples. The rows are cut into chunks with
  no work per batch either: each pass's order is one [batches, batch_size]
  matrix and `rebatch` slices the stream of passes into the chunk sizes of a
  Keras epoch in turn (per-batch dataset elements took ~0.04 ms a batch:
  batch softmax's centralized `fit` ran at 0.6-0.85 of its pace on one
  cached chunk).
  """
  if batches_per_epoch < 1 or chunk_size < 1:
    raise ValueError("batches_per_epoch and chunk_size (--steps_per_execution) must be "
                     f">= 1, got {batches_per_epoch} and {chunk_size}")
  _check_batching(batch_size, 1)
  tensors = tf.nest.map_structure(tf.constant, arrays)
  count = _row_count(arrays)
  batches_per_pass = -(-count // batch_size)

  def pass_batches(pass_num):  # The short batch padded with -1.
    order = tf.pad(_pass_order(count, shuffle_seed, pass_num),
                   [[0, batches_per_pass * batch_size - count]], constant_values=-1)
    return tf.reshape(order, [batches_per_pass, batch_size])

  def gather(chunk_rows):
    lengths = tf.reduce_sum(tf.cast(chunk_rows >= 0, tf.int32), axis=1)
    batches = tf.nest.map_structure(
        lambda t: tf.gather(t, tf.maximum(chunk_rows, 0)), tensors)
    return batches, lengths

  epoch_chunks = [chunk_size] * (batches_per_epoch // chunk_size) + (
      [batches_per_epoch % chunk_size] if batches_per_epoch % chunk_size else [])
  return _passes(None).map(pass_batches).rebatch(
      tf.constant(epoch_chunks, tf.int64)).map(gather).prefetch(2)


def centralized_arrays(examples: Examples, positives_as_input: bool = False):
  """(inputs, labels) of every example as arrays: what the centralized
  datasets batch."""
  return _inputs(examples, positives_as_input), examples.labels.astype(np.int32)


def centralized_chunks(examples: Examples, chunk_size: int):
  """All examples in their order as NumPy (contexts, labels) chunks of up to
  `chunk_size`: what evaluation scores (training shuffles
  `centralized_arrays` in chunks). Slices, not a tf.data pipeline, whose
  build cost more than scoring a small split."""
  inputs, labels = centralized_arrays(examples)
  for start in range(0, len(labels), chunk_size):
    yield (tf.nest.map_structure(lambda a: a[start:start + chunk_size], inputs),
           labels[start:start + chunk_size])
