"""The federated process of a model whose clients each hold a sub-model.

FedAwS and FedSS (and sampled global softmax for MovieLens) share one shape:
the model is a dense part (the "tower": every client receives all of it) and
an embedding table of which each client receives only the rows of its keys;
optionally the tower's first weight, an embedding bag over sparse features,
is selected the same way (`SelectedBag`: a client receives only the rows of
the features its points contain). A round (`SubModelProcess.next`):
1. Every client computes its fixed-size class key set from its own data and
   the round (`SubModelSpec.client_keys`) and the features it holds
   (`SelectedBag.keys`), as a TFF computation on the clients.
2. The server answers each client with the rows of its keys (and, with a
   selected bag, the bag rows of its features, no padding), and the TFF round
   (`client_round`) broadcasts the dense tower, runs SGD on `SubModelSpec.loss`
   on every client and returns the example-weighted mean dense delta, the
   loss sums and each client's row deltas. With `whole_table` (full softmax,
   the reference the sub-models are measured against) the table itself is
   broadcast and averaged instead.
3. The server takes a server-optimizer step on the tower with the mean delta
   (a selected bag's rows averaged over every client of the round, zeros where
   a client lacked a feature: the same step as a broadcast bag), adds to each
   class row the mean delta of the clients that held it (rows nobody held are
   untouched), then an optional step on the whole table (`table_step`,
   FedAwS's spreadout).

With `sharded` (runs default to it: `--client_shards`), a TFF client is a
shard of clients, their batches one client after another
(`ClientDatasets.shard_dataset`), as FedAvg's shards (`client_shards`) are:
step 1 returns each of the shard's clients' keys, computed from that
client's own examples; the server packs their answers into one; step 2
trains the shard's clients one after another in one pass over its batches,
each from the round's model with its own rows, and returns their uploads
stacked and their tower deltas' mean. The round is the one of a TFF client
each (tested) without TFF's cost per client call, twice a round (a
client's dataset serialized into the worker, its result out): on
`xc_small`, 100 clients a round, a FedAwS round took 0.70 s instead of 1.33.

Why the server's side runs in Python and not in TFF (measured here, TFF 0.87):
`tff.federated_select` passes the whole table into each key's selection (~10
ms a key at [200k, 64] against 0.23 ms at [20k, 64]), and `federated_aggregate`
keeps every client's accumulator alive (+50 MB a client at [200k, 64]), so the
server's work and memory grew with clients x table. Here it is O(rows touched)
per client, and the TFF worker only ever holds the clients' sub-models.

The rows take a plain mean (FedAvg's server step at rate 1), not the server
optimizer: a stateful optimizer (momentum, Adam) would keep moving rows that
no client held this round. Which mean (`row_mean`):
- `holders`: each row's deltas averaged over the clients that held it. A row
  moves as far as its holders moved it, however few: fast where a row's only
  holder is the client of its class, but a row one client sampled as a
  negative takes that client's whole push.
- `clients`: FedAvg's mean over every client of the round, weighted by
  examples, a row's delta counting as zero on clients that did not hold it
  (paper 003: "the same procedure as FedAvg is used for aggregating").

With `dp` (`differential_privacy.ClientDP`) the dense part is aggregated as
DP-FedAvg does: each client clips its tower delta (with `whole_table`, its
tower and table deltas together), the server sums them, adds Gaussian noise
and divides by the expected clients. The selected rows (class rows, a
selected bag's rows) are not covered: which rows a client asks for reveals
which keys it holds, whatever noise is added to their values.

Model weights are the tower's then the table, or the table then the tower's
(`table_first`), in the order of the task's Keras model's trainable variables.
"""

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import optimizers
from tasks import client_data

ROW_MEANS = ("holders", "clients")
FLOAT_BYTES = 4
KEY_BYTES = 4
# (a client's examples: its batches as one batch, round seed [2] int64: (seed,
# round)) -> (keys [K] int32, is_real [K] bool).
ClientKeysFn = Callable[[Any, tf.Tensor], Tuple[tf.Tensor, tf.Tensor]]
# (tower weights, rows [K, D], keys [K], is_real [K], batch) -> scalar loss.
ClientLossFn = Callable[[List[tf.Tensor], tf.Tensor, tf.Tensor, tf.Tensor, Any],
                        tf.Tensor]
# (table [C, D], ids of the rows updated this round) -> table.
TableStepFn = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]


@dataclasses.dataclass(frozen=True)
class SelectedBag:
  """The tower's first weight, an embedding bag, as a selected table.

  `keys(examples)`: the sorted distinct bag rows a client's examples (its
  batches as one batch) read, [None] int32. `localize(batch, keys)`: the
  batch with its feature ids replaced by their positions among the keys, so
  the tower reads the client's rows.
  """
  keys: Callable[[Any], tf.Tensor]
  localize: Callable[[Any, tf.Tensor], Any]


@dataclasses.dataclass(frozen=True)
class SubModelSpec:
  """What a sub-model process needs of an algorithm on a model family."""
  initial_tower: Sequence[np.ndarray]
  initial_table: np.ndarray
  batch_type: Any  # TFF type of one batch: (inputs, labels).
  num_keys: int
  client_keys: Optional[ClientKeysFn]  # None with `whole_table`: every row.
  loss: ClientLossFn
  client_learning_rate: float
  server_optimizer: str = "adam"
  server_learning_rate: float = 0.03
  trains_rows: bool = True
  whole_table: bool = False
  table_step: Optional[TableStepFn] = None
  table_first: bool = False
  row_mean: str = "holders"
  bag: Optional[SelectedBag] = None
  seed: int = 0
  dp: Optional[differential_privacy.ClientDP] = None  # Of the dense part.
  # `next` takes shards of clients (`ClientDatasets.shard_dataset`), each
  # client still with its own keys, answer and upload (module docstring).
  sharded: bool = False

  def __post_init__(self):
    if self.num_keys < 1:
      raise ValueError(f"a client's key set must hold >= 1 row, got {self.num_keys}")
    if self.whole_table and self.num_keys != len(self.initial_table):
      raise ValueError("whole_table: the key set is every row "
                       f"({len(self.initial_table)}), got {self.num_keys}")
    if self.row_mean not in ROW_MEANS:
      raise ValueError(f"--row_mean must be one of {', '.join(ROW_MEANS)}, got "
                       f"'{self.row_mean}'")
    if (self.client_keys is None) != self.whole_table:
      raise ValueError("client_keys is needed exactly when clients select rows "
                       "(not whole_table)")
    if self.dp is not None and self.dp.config.clipping != "fixed":
      raise ValueError("--dp_clipping=adaptive: the sub-model algorithms clip at "
                       "a fixed --clip_norm")
    if self.sharded and self.dp is not None:
      raise ValueError("--client_shards: a DP run clips each client's update, so it "
                       "keeps one TFF client per client")
    if self.bag is not None and (self.whole_table or not self.initial_tower):
      raise ValueError("a selected bag needs a tower and selected rows (full "
                       "softmax keeps the whole model)")


def bytes_per_client(tower_shapes: Sequence[Sequence[int]], num_keys: int, dim: int,
                     trains_rows: bool = True, whole_table: bool = False,
                     bag_rows: Optional[float] = None) -> Tuple[float, float]:
  """(download, upload) bytes of one client in one round, from the shapes.

  Down: the tower and its rows (`whole_table`: the table); with `bag_rows`
  (a selected bag) only that many rows of the tower's first weight. Up: the
  tower delta, loss sum and count; with selected rows also its keys (the
  request) and, if rows train, the row deltas with their keys and real-key
  mask; with a selected bag its feature ids (the request) and their row
  deltas; with the whole table, the table delta.
  """
  tower_shapes = [tuple(s) for s in tower_shapes]
  bag_up = 0.0
  if bag_rows is not None:
    bag_dim = tower_shapes[0][1]
    tower_shapes = [(bag_rows, bag_dim)] + tower_shapes[1:]
    bag_up = KEY_BYTES * bag_rows
  tower = FLOAT_BYTES * sum(float(np.prod(s)) for s in tower_shapes)
  rows = FLOAT_BYTES * num_keys * dim
  up = tower + 2 * FLOAT_BYTES + bag_up
  if whole_table:
    return tower + rows, up + rows
  up += KEY_BYTES * num_keys
  if trains_rows:
    up += rows + 2 * KEY_BYTES * num_keys
  return tower + rows, up


def _tensor_type(shape, dtype=np.float32) -> tff.TensorType:
  return tff.TensorType(dtype, shape)


def _sgd_step(spec: SubModelSpec, state, batch, keys: tf.Tensor, is_real: tf.Tensor):
  """One SGD step of a client on `batch`: state (tower tuple, rows, loss sum,
  examples) -> state."""
  weights, current_rows, loss_sum, count = state
  weights = list(weights)  # Loops carry a tuple.
  with tf.GradientTape() as tape:
    tape.watch(weights + [current_rows])
    loss = spec.loss(weights, current_rows, keys, is_real, batch)
  grads = tape.gradient(loss, weights + [current_rows])
  weights = tuple(optimizers.add_scaled(w, g, -spec.client_learning_rate)
                  for w, g in zip(weights, grads[:-1]))
  if spec.trains_rows:
    current_rows = optimizers.add_scaled(current_rows, grads[-1],
                                         -spec.client_learning_rate)
  examples = tf.cast(tf.shape(batch[1])[0], tf.float32)
  return weights, current_rows, loss_sum + loss * examples, count + examples


def local_training(spec: SubModelSpec, tower: Sequence[tf.Tensor], rows: tf.Tensor,
                   keys: tf.Tensor, is_real: tf.Tensor, dataset: tf.data.Dataset):
  """SGD over the client's batches; returns (tower, rows, loss sum, examples).

  The batches are read with an iterator loop, not `dataset.reduce`: the
  reduce op instantiates its step function anew on every call, which cost
  ~0.1 s a client here, more than the client's training."""

  @tf.function
  def train(state, dataset):
    for batch in iter(dataset):
      state = _sgd_step(spec, state, batch, keys, is_real)
    return state

  return train((tuple(tower), rows, tf.constant(0.0), tf.constant(0.0)), dataset)


def _all_examples(dataset: tf.data.Dataset):
  """A dataset's batches as one batch of all their examples."""
  return dataset.unbatch().batch(2 ** 31 - 1).get_single_element()


def _pack_answers(answers: Sequence[tuple], shard_sizes: Sequence[int],
                  bagged: bool) -> List[tuple]:
  """Each shard's clients' answers as one: rows [n, K, D], keys and is_real
  [n, K]; with a bag, the clients' bag rows and keys one after another and
  each client's count of them [n]."""
  packed, start = [], 0
  for size in shard_sizes:
    group, start = answers[start:start + size], start + size
    answer = tuple(np.stack([a[j] for a in group]) for j in range(3))
    if bagged:
      answer += (np.concatenate([a[3] for a in group]),
                 np.concatenate([a[4] for a in group]),
                 np.array([len(a[4]) for a in group], np.int32))
    packed.append(answer)
  return packed


def _split_clients(shard_outputs: Sequence[tuple], bag_sizes: Sequence[np.ndarray]
                   ) -> List[tuple]:
  """Per-client tuples from shard outputs `(per-client fields [n, ...]...,
  [concatenated bag field,] per-client field [n])`: a shard's bag field is cut
  at its clients' `bag_sizes` (an empty array each when there is no bag)."""
  clients = []
  for output, sizes in zip(shard_outputs, bag_sizes):
    fields = [np.asarray(f) for f in output]
    bagged = len(sizes) > 0
    cut = np.split(fields[-2], np.cumsum(sizes)[:-1]) if bagged else None
    stacked = fields[:-2] if bagged else fields[:-1]
    for i in range(len(fields[-1])):
      clients.append(tuple(f[i] for f in stacked) + ((cut[i],) if bagged else ())
                     + (fields[-1][i],))
  return clients


def row_means(keys: Sequence[np.ndarray], deltas: Sequence[np.ndarray],
              is_real: Sequence[np.ndarray], weights: Sequence[float], row_mean: str
              ) -> Tuple[np.ndarray, np.ndarray]:
  """(row ids, mean delta of each) over the clients' real rows, O(rows touched).

  `holders`: each row's deltas averaged over the clients that held it;
  `clients`: the example-weighted sum over every client divided by the
  round's total weight (a non-holder counting as a zero delta).
  """
  real_keys = np.concatenate([np.asarray(k)[np.asarray(r)] for k, r in zip(keys, is_real)])
  scale = weights if row_mean == "clients" else [1.0] * len(weights)
  real_deltas = np.concatenate([np.asarray(d)[np.asarray(r)] * w
                                for d, r, w in zip(deltas, is_real, scale)])
  ids, inverse = np.unique(real_keys, return_inverse=True)
  # Sums per row by TF's segment sum: a round of xc_small's bag (100 clients,
  # ~50k rows of 256) took 0.03 s, against 0.27 s sorting for np.add.reduceat
  # in float64 and 0.47 s with np.add.at (Bibtex's bag).
  sums = tf.math.unsorted_segment_sum(real_deltas, inverse, len(ids)).numpy()
  if row_mean == "clients":
    divisor = max(float(np.sum(weights)), 1e-12)
  else:
    divisor = np.bincount(inverse, minlength=len(ids))[:, None]
  return ids.astype(np.int32), (sums / divisor).astype(np.float32)


def _numpy(structure):
  return tf.nest.map_structure(np.asarray, structure)


class SubModelProcess:
  """The spec's algorithm with the `tff.learning.templates.LearningProcess`
  methods the run loop calls (`initialize`, `next`, `get_model_weights`,
  `set_model_weights`); the state is a structure of arrays, saved by the
  loop's checkpoints like any TFF state: NumPy arrays, but the tower and the
  server optimizer's state as the server's step returned them, TF tensors
  (a NumPy array goes into TF by a copy: on xc_small, its 20,000-row bag and
  Adam moments, ~9 ms a round)."""

  def __init__(self, spec: SubModelSpec):
    self._spec = spec
    shapes = [tuple(w.shape) for w in spec.initial_tower]
    self._bagged = spec.bag is not None
    self._dense_shapes = shapes[1:] if self._bagged else shapes
    num_rows, self._dim = spec.initial_table.shape
    self._optimizer = optimizers.tff_optimizer(
        spec.server_optimizer, spec.server_learning_rate, "server_optimizer")
    # The server's step on the tower as one graph: Adam on xc_small's tower
    # (a 20,000-row bag) 25-27 ms a round, against 33-35 ms op by op.
    self._server_step = tf.function(
        lambda state, weights, mean_deltas: self._optimizer.next(
            state, weights, [-d for d in mean_deltas]))
    self._initial_tower = [np.asarray(w, np.float32) for w in spec.initial_tower]
    self._initial_table = np.asarray(spec.initial_table, np.float32)
    # A client's batches, or a shard's (`client_data.Shard`).
    data_type = tff.SequenceType(
        tff.types.tensorflow_to_type(client_data.shard_spec(
            tff.types.type_to_tf_tensor_specs(tff.types.to_type(spec.batch_type))))
        if spec.sharded else spec.batch_type)
    if not spec.whole_table:
      self.client_keys = self._build_client_keys(data_type)
    self.client_round = self._build_client_round(data_type, num_rows)
    if spec.table_step is not None:
      self._table_step = tf.function(spec.table_step, input_signature=[
          tf.TensorSpec([num_rows, self._dim], tf.float32),
          tf.TensorSpec([None], tf.int32)])

  def _build_client_keys(self, data_type):
    """TFF: (round seed @SERVER, data @CLIENTS) -> each client's keys @CLIENTS."""
    spec, num_keys = self._spec, self._spec.num_keys

    def keys_of_client(examples, seed):
      keys, is_real = spec.client_keys(examples, seed)
      keys = (tf.reshape(tf.cast(keys, tf.int32), [num_keys]),
              tf.reshape(is_real, [num_keys]))
      if spec.bag is None:
        return keys
      return keys + (tf.cast(spec.bag.keys(examples), tf.int32),)

    @tf.function
    def keys_of_shard(dataset, seed):
      """(keys [n, K], is_real [n, K]) of the shard's n clients; with a bag,
      also their bag keys one after another and each one's count [n]."""
      shard = client_data.read_shard(dataset)
      examples, bounds = shard.examples, client_data.shard_client_bounds(shard)
      clients = tf.size(bounds) - 1
      keys = tf.TensorArray(tf.int32, size=clients, element_shape=[num_keys])
      is_real = tf.TensorArray(tf.bool, size=clients, element_shape=[num_keys])
      bag_keys = tf.TensorArray(tf.int32, size=clients, element_shape=[None],
                                infer_shape=False)
      bag_sizes = tf.TensorArray(tf.int32, size=clients, element_shape=[])
      for i in tf.range(clients):
        client = keys_of_client(tf.nest.map_structure(
            lambda t: t[bounds[i]:bounds[i + 1]], examples), seed)
        keys, is_real = keys.write(i, client[0]), is_real.write(i, client[1])
        if spec.bag is not None:
          bag_keys = bag_keys.write(i, client[2])
          bag_sizes = bag_sizes.write(i, tf.size(client[2]))
      if spec.bag is None:
        return keys.stack(), is_real.stack()
      return keys.stack(), is_real.stack(), bag_keys.concat(), bag_sizes.stack()

    @tff.tensorflow.computation(data_type, _tensor_type([2], np.int64))
    def keys_of(dataset, seed):
      if spec.sharded:
        return keys_of_shard(dataset, seed)
      return keys_of_client(_all_examples(dataset), seed)

    @tff.federated_computation(tff.FederatedType(_tensor_type([2], np.int64), tff.SERVER),
                               tff.FederatedType(data_type, tff.CLIENTS))
    def client_keys(seed, client_data):
      return tff.federated_map(keys_of, (client_data, tff.federated_broadcast(seed)))

    return client_keys

  def _build_client_round(self, data_type, num_rows):
    """TFF: (broadcast @SERVER, answers @CLIENTS, data @CLIENTS) -> (mean
    broadcast delta, loss sum, examples @SERVER; uploads @CLIENTS)."""
    spec, dim, num_keys, bagged = self._spec, self._dim, self._spec.num_keys, self._bagged
    dense_type = tff.StructWithPythonType(
        [_tensor_type(s) for s in self._dense_shapes], list)
    if spec.whole_table:
      broadcast_type = (dense_type, _tensor_type([num_rows, dim]))
      answer_type = None
    else:
      broadcast_type = (dense_type,)
      clients = [None] if spec.sharded else []  # A shard's: one row per client.
      answer_type = (_tensor_type(clients + [num_keys, dim]),
                     _tensor_type(clients + [num_keys], np.int32),
                     _tensor_type(clients + [num_keys], np.bool_))
      if bagged:
        answer_type += (_tensor_type([None, self._initial_tower[0].shape[1]]),
                        _tensor_type([None], np.int32))
        if spec.sharded:  # Each client's count of bag rows.
          answer_type += (_tensor_type([None], np.int32),)
    broadcast_type = tff.StructWithPythonType(broadcast_type, tuple)
    if answer_type is not None:
      answer_type = tff.StructWithPythonType(answer_type, tuple)

    def client_start(broadcast, answer):
      """(tower, rows, keys, is_real, bag keys) a client trains from: the
      broadcast and its answer (the tower's first weight its bag rows)."""
      tower = tuple(broadcast[0])
      bag_keys = tf.zeros([0], tf.int32)  # No bag: never read.
      if spec.whole_table:
        rows = broadcast[1]
        keys, is_real = tf.range(num_rows), tf.ones([num_rows], tf.bool)
      else:
        rows, keys, is_real = answer[0], answer[1], answer[2]
      if bagged:
        tower, bag_keys = (answer[3],) + tower, answer[4]
      return tower, rows, keys, is_real, bag_keys

    def client_result(tower, rows, new_tower, new_rows, loss_sum, count):
      """(mean-able deltas, loss sum, examples[, uploads]) of a trained client."""
      deltas = [n - o for n, o in zip(new_tower, tower)]
      row_delta = new_rows - rows
      if spec.dp is not None and spec.whole_table:
        *deltas, row_delta = spec.dp.clipped(deltas + [row_delta])
      elif spec.dp is not None and bagged:  # The bag's (deltas[0]) are rows.
        deltas = deltas[:1] + spec.dp.clipped(deltas[1:])
      elif spec.dp is not None:
        deltas = spec.dp.clipped(deltas)
      if spec.whole_table:
        return (deltas, row_delta), loss_sum, count
      uploads = (row_delta, deltas[0], count) if bagged else (row_delta, count)
      return (deltas[1:] if bagged else deltas,), loss_sum, count, uploads

    def localized(batch, bag_keys):
      return spec.bag.localize(batch, bag_keys) if bagged else batch

    def train(broadcast, answer, dataset):
      """`client_result` of one client trained on its dataset."""
      tower, rows, keys, is_real, bag_keys = client_start(broadcast, answer)
      if bagged:
        dataset = dataset.map(lambda x, y: localized((x, y), bag_keys))
      return client_result(tower, rows, *local_training(spec, tower, rows, keys,
                                                        is_real, dataset))

    weighted = spec.row_mean == "clients"
    private = spec.dp is not None  # Clipped deltas: summed, noised on the server.

    def table_weight(count):
      """The weight of a client's table delta in the round's mean."""
      return count if weighted else tf.constant(1.0)

    def client_answer(answer, bag_ends, i):
      """Client i's answer from its shard's (`_pack_answers`); `bag_ends`:
      where each client's bag rows end among the shard's."""
      if spec.whole_table:
        return None
      picked = (answer[0][i], answer[1][i], answer[2][i])
      if bagged:
        start, end = bag_ends[i] - answer[5][i], bag_ends[i]
        picked += (answer[3][start:end], answer[4][start:end])
      return picked

    @tf.function
    def train_shard(broadcast, answer, dataset):
      """Each of the shard's clients trained in turn from the round's model,
      in one pass over its batches (as `client_shards` does): the shared
      deltas' mean over them as the round weighs them (the tower by
      examples; the whole table by examples or per client), the loss sum and
      examples; with the whole table, the table mean's weight; else each
      client's uploads, stacked (bag deltas one after another). (No DP:
      a shard's mean is not one client's clipped update.)"""
      zeros = tuple(tf.zeros_like(t) for t in tf.nest.flatten(broadcast))
      slots = (0 if spec.whole_table else tf.shape(answer[1])[0])
      bag_ends = tf.cumsum(answer[5]) if bagged else None
      uploads = (tf.TensorArray(tf.float32, size=slots, element_shape=[num_keys, dim]),
                 tf.TensorArray(tf.float32, size=slots, infer_shape=False,
                                element_shape=[None, None]),
                 tf.TensorArray(tf.float32, size=slots, element_shape=[]))

      def add(totals, i, result):
        sums, loss_total, examples, table_total, (row_ta, bag_ta, count_ta) = totals
        shared, loss_sum, count = result[:3]
        weights = [count] * len(broadcast[0]) + (
            [table_weight(count)] if spec.whole_table else [])
        sums = tuple(total + w * d
                     for total, w, d in zip(sums, weights, tf.nest.flatten(shared)))
        if not spec.whole_table:
          row_ta, count_ta = row_ta.write(i, result[3][0]), count_ta.write(i, count)
          if bagged:
            bag_ta = bag_ta.write(i, result[3][1])
        return (sums, loss_total + loss_sum, examples + count,
                table_total + table_weight(count), (row_ta, bag_ta, count_ta))

      totals = (zeros, tf.constant(0.0), tf.constant(0.0), tf.constant(0.0), uploads)
      shard = client_data.read_shard(dataset)
      client_batches = client_data.shard_client_batches(shard)
      for i in tf.range(tf.size(client_batches) - 1):
        tower, rows, keys, is_real, bag_keys = client_start(broadcast,
                                                            client_answer(answer, bag_ends, i))
        state = (tower, rows, tf.constant(0.0), tf.constant(0.0))
        for index in tf.range(client_batches[i], client_batches[i + 1]):
          state = _sgd_step(spec, state, localized(client_data.shard_batch(shard, index),
                                                   bag_keys), keys, is_real)
        totals = add(totals, i, client_result(tower, rows, *state))
      sums, loss_total, examples, table_total, (row_ta, bag_ta, count_ta) = totals
      divisors = [examples] * len(broadcast[0]) + (
          [table_total] if spec.whole_table else [])
      shared = tf.nest.pack_sequence_as(
          broadcast, [tf.math.divide_no_nan(total, d) for total, d in zip(sums, divisors)])
      if spec.whole_table:
        return shared, loss_total, examples, table_total
      return shared, loss_total, examples, ((row_ta.stack(), bag_ta.concat(), count_ta.stack())
                                            if bagged else (row_ta.stack(), count_ta.stack()))

    server_broadcast = tff.FederatedType(broadcast_type, tff.SERVER)
    data_at_clients = tff.FederatedType(data_type, tff.CLIENTS)

    if spec.whole_table:
      @tff.tensorflow.computation(broadcast_type, data_type)
      def whole_update(broadcast, dataset):
        if spec.sharded:
          return train_shard(broadcast, None, dataset)
        shared, loss_sum, count = train(broadcast, None, dataset)
        return shared, loss_sum, count, table_weight(count)

      @tff.federated_computation(server_broadcast, data_at_clients)
      def whole_round(broadcast, client_data):
        shared, loss_sum, count, table_weights = tff.federated_map(
            whole_update, (tff.federated_broadcast(broadcast), client_data))
        if private:
          return (tff.federated_zip((tff.federated_sum(shared[0]),
                                     tff.federated_sum(shared[1]))),
                  tff.federated_sum(loss_sum), tff.federated_sum(count))
        # Every client holds every row: with `holders`, a mean over clients.
        mean_table = tff.federated_mean(shared[1], weight=table_weights)
        mean = tff.federated_zip((tff.federated_mean(shared[0], weight=count),
                                  mean_table))
        return mean, tff.federated_sum(loss_sum), tff.federated_sum(count)

      return whole_round

    @tff.tensorflow.computation(broadcast_type, answer_type, data_type)
    def client_update(broadcast, answer, dataset):
      return (train_shard if spec.sharded else train)(broadcast, answer, dataset)

    @tff.federated_computation(server_broadcast,
                               tff.FederatedType(answer_type, tff.CLIENTS),
                               data_at_clients)
    def client_round(broadcast, answers, client_data):
      shared, loss_sum, count, uploads = tff.federated_map(
          client_update, (tff.federated_broadcast(broadcast), answers, client_data))
      mean = tff.federated_zip(((tff.federated_sum(shared[0]) if private else
                                 tff.federated_mean(shared[0], weight=count)),))
      return mean, tff.federated_sum(loss_sum), tff.federated_sum(count), uploads

    return client_round

  def initialize(self) -> Dict[str, Any]:
    return {"tower": [w.copy() for w in self._initial_tower],
            "table": self._initial_table.copy(),
            "optimizer": _numpy(self._optimizer.initialize(
                [tf.TensorSpec(w.shape, tf.float32) for w in self._initial_tower])),
            "round": np.int64(0)}

  def _answers(self, state, keys) -> List[tuple]:
    """What the server sends each client: its class rows (and bag rows)."""
    answers = []
    bag = np.asarray(state["tower"][0]) if self._bagged else None  # A tensor's view.
    for client_keys in keys:
      class_keys, is_real = np.asarray(client_keys[0]), np.asarray(client_keys[1])
      answer = (state["table"][class_keys], class_keys, is_real)
      if self._bagged:
        bag_keys = np.asarray(client_keys[2])
        answer += (bag[bag_keys], bag_keys)
      answers.append(answer)
    return answers

  def next(self, state, client_data) -> tff.learning.templates.LearningProcessOutput:
    spec = self._spec
    round_num = int(state["round"]) + 1
    dense = state["tower"][1:] if self._bagged else state["tower"]
    if spec.whole_table:
      keys, uploads = None, None
      mean, loss_sum, count = self.client_round((list(dense), state["table"]),
                                                client_data)
    elif spec.sharded:
      shard_keys = self.client_keys(np.array([spec.seed, round_num], np.int64),
                                    client_data)
      bag_sizes = [np.asarray(k[-1]) if self._bagged else np.zeros(0, np.int32)
                   for k in shard_keys]
      keys = [k[:3] for k in _split_clients(shard_keys, bag_sizes)]
      mean, loss_sum, count, shard_uploads = self.client_round(
          (list(dense),), _pack_answers(self._answers(state, keys),
                                        [len(k[0]) for k in shard_keys], self._bagged),
          client_data)
      uploads = _split_clients(shard_uploads, bag_sizes)
    else:
      keys = self.client_keys(np.array([spec.seed, round_num], np.int64), client_data)
      mean, loss_sum, count, uploads = self.client_round(
          (list(dense),), self._answers(state, keys), client_data)
    mean_tower = [np.asarray(d) for d in mean[0]]
    table_delta = np.asarray(mean[1]) if spec.whole_table else None
    if spec.dp is not None:  # Sums of clipped updates -> their noised mean.
      noised = spec.dp.noised_mean(
          mean_tower + ([table_delta] if spec.whole_table else []), (spec.seed, round_num))
      mean_tower = noised[:len(mean_tower)]
      table_delta = noised[-1] if spec.whole_table else None
    if self._bagged:  # The bag's mean delta over every client, zeros where absent.
      ids, means = row_means([k[2] for k in keys], [u[1] for u in uploads],
                             [np.ones(len(k[2]), bool) for k in keys],
                             [float(u[-1]) for u in uploads], "clients")
      bag_delta = np.zeros(state["tower"][0].shape, np.float32)
      bag_delta[ids] = means
      mean_tower = [bag_delta] + mean_tower
    optimizer_state, tower = self._server_step(state["optimizer"], state["tower"],
                                               mean_tower)
    table = state["table"]
    if spec.trains_rows:
      table = table.copy()
      if spec.whole_table:
        table += table_delta
        updated = np.arange(len(table), dtype=np.int32)
      else:
        updated, means = row_means([k[0] for k in keys], [u[0] for u in uploads],
                                   [k[1] for k in keys], [float(u[-1]) for u in uploads],
                                   spec.row_mean)
        table[updated] += means
      if spec.table_step is not None:
        table = self._table_step(tf.constant(table), tf.constant(updated)).numpy()
    new_state = {"tower": list(tower), "table": table, "optimizer": optimizer_state,
                 "round": np.int64(round_num)}
    total = float(count)
    metrics = {"client_work": {"train": {"loss": float(loss_sum) / max(total, 1.0),
                                         "num_examples": total}}}
    return tff.learning.templates.LearningProcessOutput(new_state, metrics)

  def get_model_weights(self, state) -> tff.learning.models.ModelWeights:
    tower, table = [np.asarray(w) for w in state["tower"]], state["table"]
    trainable = [table] + tower if self._spec.table_first else tower + [table]
    return tff.learning.models.ModelWeights(trainable=trainable, non_trainable=[])

  def set_model_weights(self, state, weights: tff.learning.models.ModelWeights):
    trainable = [np.asarray(w, np.float32) for w in weights.trainable]
    table, tower = ((trainable[0], trainable[1:]) if self._spec.table_first
                    else (trainable[-1], trainable[:-1]))
    return {**state, "tower": tower, "table": table}


# What the run loop drives: a sub-model process or a stock TFF one.
Process = Union[SubModelProcess, tff.learning.templates.LearningProcess]


def build_sub_model_process(spec: SubModelSpec) -> SubModelProcess:
  """The spec's algorithm as a process the run loop drives."""
  return SubModelProcess(spec)
