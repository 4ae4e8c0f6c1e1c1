"""The clients' side of a sub-model round, as TFF computations.

`build_client_keys`: each client's key set (the class rows it asks for) and,
with a selected bag, its bag rows, computed from its own data and the round.
`ClientRound`: the TFF round itself: the dense tower broadcast, each client
(or each shard's clients one after another) trains by SGD from the round's
model with the rows it was answered, and returns its deltas. The tower's
deltas are averaged in TFF (example-weighted; DP: summed after each client
clips its own); a client's rows (and bag rows) come back for the server to
average (`row_sums.RowSums`). Sharded, the deltas come back summed per
row: a shard's class rows' on its distinct rows, with how many clients held
each, and a call's bag's over its shards in TFF on the call's bag rows (or
either as one array of the table's shape when those rows are most of it,
`DENSE_SHARE`); the class rows and the bag rows a worker's calls read are
values it holds for the round (`sub_model_answers.RoundRows`): a shard's
answer says where its distinct class rows are among the worker's, and a
call broadcasts which bag rows its shards read, each shard gathering its
clients' rows by the bag keys its keys' computation left in the worker.
With the whole table, the table is broadcast and averaged as the tower is. A shard's
loops are `tf.while_loop`s with autograph off (as in `client_shards`):
converting them and all they call was 5.3 of the 7.6 s a small XC run spent
in autograph.
"""

from typing import Any, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import optimizers
from tasks import client_data

# A sharded call (its bag rows) or shard (its class rows) that reads at least
# this share of the table's rows returns its sums as an array of the table's
# shape (zeros where none read), which the server adds in one pass; one
# reading fewer returns them on its rows (the same sums, to the bit). Chosen
# on the bag: FedAwS at Amazon-670K's shape (shares from the answers' bytes,
# dense and not): calls of 500 clients read 99.7% of the bag, and dense took
# the driver's CPU a round on 3 workers from 1.11-1.14 to 1.00-1.01 s (two
# runs each way, side by side); a round of 100 clients reads 70%, and dense
# made its worker's answer 36 MB instead of 25 and the round at 10k labels
# 0.34-0.37 s instead of 0.31-0.32 (4 sittings each). Bibtex's and
# Delicious's calls of 100 clients read 99.6-100% of their small bags, dense:
# FedAwS's metrics the same to the bit, 10 passes in 26.0 and 45.7 s
# against 25.7 and 44.5 by key (one run each). A shard's class rows are
# fewer: FedSS's and FedAwS's shards read 34-39% and 15% of Bibtex's
# labels, 78-82% and 14% of Delicious's, keyed (seed 0, 2 passes; one-off).
DENSE_SHARE = 0.9


def tensor_type(shape, dtype=np.float32) -> tff.TensorType:
  return tff.TensorType(dtype, shape)


def sgd_step(spec, state, batch, keys: tf.Tensor, is_real: tf.Tensor):
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


def local_training(spec, tower: Sequence[tf.Tensor], rows: tf.Tensor, keys: tf.Tensor,
                   is_real: tf.Tensor, dataset: tf.data.Dataset):
  """SGD over the client's batches; returns (tower, rows, loss sum, examples).

  The batches are read with an iterator loop, not `dataset.reduce`: the
  reduce op instantiates its step function anew on every call, which cost
  ~0.1 s a client here, more than the client's training."""

  @tf.function
  def train(state, dataset):
    for batch in iter(dataset):
      state = sgd_step(spec, state, batch, keys, is_real)
    return state

  return train((tuple(tower), rows, tf.constant(0.0), tf.constant(0.0)), dataset)


def _all_examples(dataset: tf.data.Dataset):
  """A dataset's batches as one batch of all their examples."""
  return dataset.unbatch().batch(2 ** 31 - 1).get_single_element()


def build_client_keys(spec, data_type):
  """TFF: (round seed @SERVER, data @CLIENTS) -> each client's keys @CLIENTS:
  (keys [K], is_real [K][, bag keys]) a client, or a shard's clients' stacked
  ([n, K], [n, K]). A shard with a bag: the pair (those and the distinct bag
  rows its clients read [U] @CLIENTS, which the server sends; each client's
  bag keys one client after another and each one's count @CLIENTS, which
  its training reads where they were computed, `worker_values.invoke_holding`)."""
  num_keys = spec.num_keys
  shard_bag = spec.sharded and spec.bag is not None

  def keys_of_client(examples, seed):
    keys, is_real = spec.client_keys(examples, seed)
    keys = (tf.reshape(tf.cast(keys, tf.int32), [num_keys]),
            tf.reshape(is_real, [num_keys]))
    if spec.bag is None:
      return keys
    return keys + (tf.cast(spec.bag.keys(examples), tf.int32),)

  @tf.function(autograph=False)
  def keys_of_shard(shard, seed):
    examples, bounds = shard.examples, client_data.shard_client_bounds(shard)
    clients = tf.size(bounds) - 1
    keys = tf.TensorArray(tf.int32, size=clients, element_shape=[num_keys])
    is_real = tf.TensorArray(tf.bool, size=clients, element_shape=[num_keys])
    bag_keys = tf.TensorArray(tf.int32, size=clients, element_shape=[None],
                              infer_shape=False)
    bag_sizes = tf.TensorArray(tf.int32, size=clients, element_shape=[])

    def add_client(i, keys, is_real, bag_keys, bag_sizes):
      client = keys_of_client(tf.nest.map_structure(
          lambda t: t[bounds[i]:bounds[i + 1]], examples), seed)
      keys, is_real = keys.write(i, client[0]), is_real.write(i, client[1])
      if spec.bag is not None:
        bag_keys = bag_keys.write(i, client[2])
        bag_sizes = bag_sizes.write(i, tf.size(client[2]))
      return i + 1, keys, is_real, bag_keys, bag_sizes

    _, keys, is_real, bag_keys, bag_sizes = tf.while_loop(
        lambda i, *arrays: i < clients, add_client,
        (tf.constant(0), keys, is_real, bag_keys, bag_sizes))
    if spec.bag is None:
      return keys.stack(), is_real.stack()
    bag_keys = bag_keys.concat()
    # The distinct rows by marking the bag's rows: O(keys + rows), in order.
    bag_rows = len(spec.initial_tower[0])
    read = tf.math.bincount(bag_keys, minlength=bag_rows, maxlength=bag_rows)
    distinct = tf.cast(tf.reshape(tf.where(read > 0), [-1]), tf.int32)
    return (keys.stack(), is_real.stack(), distinct), (bag_keys, bag_sizes.stack())

  @tff.tensorflow.computation(data_type, tensor_type([2], np.int64))
  def keys_of(data, seed):  # A client's dataset, or a shard's arrays.
    if spec.sharded:
      return keys_of_shard(data, seed)
    return keys_of_client(_all_examples(data), seed)

  @tff.federated_computation(tff.FederatedType(tensor_type([2], np.int64), tff.SERVER),
                             tff.FederatedType(data_type, tff.CLIENTS))
  def client_keys(seed, client_data_):
    keys = tff.federated_map(keys_of, (client_data_, tff.federated_broadcast(seed)))
    return (keys[0], keys[1]) if shard_bag else keys

  return client_keys


def _gathered(pieces, places: tf.Tensor) -> tf.Tensor:
  """The rows at `places` among the pieces' rows end to end (a worker's class
  rows, one piece a table server's range), each piece read where its rows
  are, none copied whole."""
  if len(pieces) == 1:
    return tf.gather(pieces[0], places)
  ends = tf.cumsum([tf.shape(p)[0] for p in pieces])
  which = tf.searchsorted(ends, places, side="right")
  within = places - tf.gather(ends - [tf.shape(p)[0] for p in pieces], which)
  positions = tf.dynamic_partition(tf.range(tf.size(places)), which, len(pieces))
  return tf.dynamic_stitch(positions, [
      tf.gather(p, w) for p, w in zip(pieces, tf.dynamic_partition(within, which,
                                                                   len(pieces)))])


def _places(call_keys: tf.Tensor, keys: tf.Tensor, table_rows: int) -> tf.Tensor:
  """Each of `keys`' place among the distinct `call_keys` (a call's bag rows,
  a shard's class rows), looked up in an array of the table's rows: binary
  searches (`tf.searchsorted`) took the three workers ~0.8 CPU s a round
  more in all at Amazon-670K's shape, 4,000 clients (FedSS's 127,500 class
  keys a shard among 212,000 rows; perf's samples, one run each)."""
  place = tf.scatter_nd(call_keys[:, None], tf.range(tf.size(call_keys)), [table_rows])
  return tf.gather(place, keys)


def _clients_bag(bag, i: tf.Tensor):
  """Client i's bag keys and their places among its call's rows, from a
  shard's `bag` (its clients' keys and places one client after another,
  each one's count of them, where each one's end)."""
  keys, positions, counts, ends = bag
  mine = slice(ends[i] - counts[i], ends[i])
  return keys[mine], positions[mine]


class ShardRowSums:
  """A shard's clients' row values summed per row, client by client as each
  ends: on every row of the table (zeros on rows none of its clients read)
  when `call_keys` (the sorted rows of the shard or of its call) are at
  least `DENSE_SHARE` of its `table_rows`, else on them, in their order.
  Every shard of a call decides alike on the call's rows: their sums add up
  in TFF.

  `add` writes into the array it is given (`tf.raw_ops.InplaceAdd`): each
  array comes from `zeros` and passes only from one `add` to the next. A
  row's values add in the clients' order: the same sums to the bit as one
  segment sum of every client's rows end to end, without that array
  (FedAwS's shards' bag rows at Amazon-670K's shape, 4,000
  clients: 334 clients of ~1,590 rows of 64 floats, ~136 MB a shard,
  mapped afresh and faulted in, 54% of a worker's page faults; perf, one
  run)."""

  def __init__(self, call_keys: tf.Tensor, table_rows: int):
    self._dense = tf.cast(tf.size(call_keys), tf.float64) >= DENSE_SHARE * table_rows
    self._rows = tf.where(self._dense, table_rows, tf.size(call_keys))

  def zeros(self, row_shape: Sequence[int], dtype=tf.float32) -> tf.Tensor:
    """A new array of sums, [rows, *row_shape]: made at each run of the
    graph (`Empty` is never folded into a constant, which `add` would write
    into at every run, as `tf.zeros` of a constant shape was)."""
    shape = tf.stack([self._rows, *row_shape])
    return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)

  def add(self, sums: tf.Tensor, values: tf.Tensor, ids: tf.Tensor, places: tf.Tensor,
          real: Optional[tf.Tensor] = None) -> tf.Tensor:
    """`sums` with a client's `values` [k, ...] added in place on their rows
    (`ids` [k] in the table, `places` [k] among `call_keys`), those not
    `real` left out."""
    segments = tf.where(self._dense, ids, places)
    if real is not None:
      segments, values = tf.boolean_mask(segments, real), tf.boolean_mask(values, real)
    return tf.raw_ops.InplaceAdd(x=sums, i=segments, v=values)


class ClientRound:
  """The TFF round of a spec's clients (`build`): what a client starts from,
  trains and returns, one client or a shard of them per TFF client."""

  def __init__(self, spec, dense_shapes, num_rows: int, dim: int, bag_dim: int,
               table_bounds: Optional[np.ndarray] = None):
    """`table_bounds` (sharded): the class table is held in ranges by table
    servers (`served_table`), [servers + 1] where each range starts and the
    end: a worker's class rows come as a piece per range, and a call leaves
    each shard's sums in the worker, split by range, for the servers."""
    self.spec, self.num_rows, self.dim, self.bag_dim = spec, num_rows, dim, bag_dim
    self.table_bounds = table_bounds
    self.pieces = 1 if table_bounds is None else len(table_bounds) - 1
    self.bag_rows = len(spec.initial_tower[0]) if spec.bag is not None else 0
    self.bagged = spec.bag is not None
    # Sharded with a bag, the bag rows the worker holds are an argument of
    # their own, and which of them the call reads and their keys go with the
    # tower (`sub_model_answers.CallBag`). They are held at the clients, all
    # equal, not at the server: TFF's C++ worker broadcasts a server value by
    # serializing it and parsing it anew, each call. At 4,000 clients at
    # Amazon-670K's shape, one worker's page faults a round went from
    # 419-444k to 273-274k and its CPU from 8.25-8.27 to 7.23-7.61 s (two
    # runs each way, alternated, 3 timed rounds; one-off, same weights).
    # The worker's class rows, sharded, are held alike.
    self.call_bag = self.bagged and spec.sharded
    self.worker_rows_type, self.worker_bag_type = (
        tff.FederatedType(tensor_type([None, d]), tff.CLIENTS, all_equal=True)
        for d in (dim, bag_dim))
    dense_type = tff.StructWithPythonType([tensor_type(s) for s in dense_shapes], list)
    if spec.whole_table:
      self.broadcast_type = tff.StructWithPythonType(
          (dense_type, tensor_type([num_rows, dim])), tuple)
      self.answer_type = None
      return
    call_bag_type = tff.StructWithPythonType(  # (keys, in_worker): `CallBag`.
        (tensor_type([None], np.int32), tensor_type([None], np.int32)), tuple)
    if spec.sharded:  # Its distinct keys' places in the worker's rows, its
      # clients' keys and is_real, its distinct keys.
      self.broadcast_type = tff.StructWithPythonType(
          (dense_type,) + ((call_bag_type,) if self.bagged else ()), tuple)
      answer = (tensor_type([None], np.int32),
                tensor_type([None, spec.num_keys], np.int32),
                tensor_type([None, spec.num_keys], np.bool_), tensor_type([None], np.int32))
    else:  # A client's rows, keys and is_real, with a bag its bag rows and keys.
      self.broadcast_type = tff.StructWithPythonType((dense_type,), tuple)
      answer = (tensor_type([spec.num_keys, dim]), tensor_type([spec.num_keys], np.int32),
                tensor_type([spec.num_keys], np.bool_))
      if self.bagged:
        answer += (tensor_type([None, bag_dim]), tensor_type([None], np.int32))
    self.answer_type = tff.StructWithPythonType(answer, tuple)
    # A shard's clients' bag keys, one client after another, and each one's
    # count: what `build_client_keys` left in the worker.
    self.bag_keys_type = tff.FederatedType(tff.StructWithPythonType(
        (tensor_type([None], np.int32), tensor_type([None], np.int32)), tuple), tff.CLIENTS)

  def start(self, broadcast, answer):
    """(tower, rows, keys, is_real, bag keys) a client trains from: the
    broadcast and its answer (the tower's first weight its bag rows)."""
    tower = tuple(broadcast[0])
    bag_keys = tf.zeros([0], tf.int32)  # No bag: never read.
    if self.spec.whole_table:
      rows = broadcast[1]
      keys, is_real = tf.range(self.num_rows), tf.ones([self.num_rows], tf.bool)
    else:
      rows, keys, is_real = answer[0], answer[1], answer[2]
    if self.bagged:
      tower, bag_keys = (answer[3],) + tower, answer[4]
    return tower, rows, keys, is_real, bag_keys

  def result(self, tower, rows, new_tower, new_rows, loss_sum, count):
    """(mean-able deltas, loss sum, examples[, uploads]) of a trained client;
    with DP, its dense deltas clipped (the whole table's with them)."""
    spec = self.spec
    deltas = [n - o for n, o in zip(new_tower, tower)]
    row_delta = new_rows - rows
    if spec.dp is not None and spec.whole_table:
      *deltas, row_delta = spec.dp.clipped(deltas + [row_delta])
    elif spec.dp is not None and self.bagged:  # The bag's (deltas[0]) are rows.
      deltas = deltas[:1] + spec.dp.clipped(deltas[1:])
    elif spec.dp is not None:
      deltas = spec.dp.clipped(deltas)
    if spec.whole_table:
      return (deltas, row_delta), loss_sum, count
    uploads = (row_delta, deltas[0], count) if self.bagged else (row_delta, count)
    return (deltas[1:] if self.bagged else deltas,), loss_sum, count, uploads

  def localized(self, batch, bag_keys):
    return self.spec.bag.localize(batch, bag_keys) if self.bagged else batch

  def table_weight(self, count):
    """The weight of a client's table delta in the round's mean."""
    return count if self.spec.row_mean == "clients" else tf.constant(1.0)

  def train(self, broadcast, answer, dataset):
    """`result` of one client trained on its dataset."""
    tower, rows, keys, is_real, bag_keys = self.start(broadcast, answer)
    if self.bagged:
      dataset = dataset.map(lambda x, y: self.localized((x, y), bag_keys))
    return self.result(tower, rows, *local_training(self.spec, tower, rows, keys,
                                                     is_real, dataset))

  def shard_answer(self, broadcast, worker_rows, worker_bag, answer, places, bag, i):
    """Client i's answer from its shard's (`sub_model_answers.shard_answers`):
    its class rows gathered from the worker's, `worker_rows`, by their
    `places` [n, K] among the shard's keys, and its bag rows from the
    worker's by the call's;
    `bag`: (the shard's clients' bag keys and their places among the call's
    rows, one client after another, each client's count of them, where each
    one's end)."""
    if self.spec.whole_table:
      return None
    picked = (_gathered(worker_rows, tf.gather(answer[0], places[i])), answer[1][i],
              answer[2][i])
    if self.bagged:
      keys, positions = _clients_bag(bag, i)
      picked += (tf.gather(worker_bag, tf.gather(broadcast[1][1], positions)), keys)
    return picked

  def train_shard(self, broadcast, answer, shard, worker_rows=None, worker_bag=None,
                  bag_keys=None):
    """Each of the `shard`'s clients (`client_data.Shard`) trained in turn
    from the round's model (their class rows read from `worker_rows`, the
    class rows its worker holds), in one pass over its batches (as `client_shards`
    does): the shared deltas' mean over them as the round weighs them (the
    tower by examples; the whole table by examples or per client), the loss
    sum and examples; with the whole table, the table mean's weight; else
    the class rows' deltas summed per row (`clients`: each client's weighted
    by its examples) and how many clients held each, on the shard's rows
    (`ShardRowSums`), and with a bag its deltas weighted by examples and summed
    per bag row, on the call's (their rows read from `worker_bag`, the rows
    its worker holds, by where the clients' `bag_keys` are among the call's).
    (No DP: a shard's mean is not one client's clipped update.)"""
    whole = self.spec.whole_table
    shared_part = broadcast if whole else broadcast[:1]  # What the round averages.
    uploads = ()  # The class rows' sums and holders, the bag's sums, as they add up.
    places = None  # Each slot's place among the shard's keys, [n, K].
    if not whole:
      ids, real, shard_keys = answer[1], answer[2], answer[3]  # [n, K], [n, K], [k].
      places = tf.reshape(_places(shard_keys, tf.reshape(ids, [-1]), self.num_rows),
                          tf.shape(ids))
      row_sums = ShardRowSums(shard_keys, self.num_rows)
      uploads = (row_sums.zeros([self.dim]), row_sums.zeros([], tf.int32))
    bag = None
    if self.bagged:
      bag = (bag_keys[0], _places(broadcast[1][0], bag_keys[0], self.bag_rows),
             bag_keys[1], tf.cumsum(bag_keys[1]))
      bag_sums = ShardRowSums(broadcast[1][0], self.bag_rows)
      uploads += (bag_sums.zeros([self.bag_dim]),)
    totals = (tuple(tf.zeros_like(t) for t in tf.nest.flatten(shared_part)),
              tf.constant(0.0), tf.constant(0.0), tf.constant(0.0), uploads)

    def with_uploads(uploads, i, result):
      """The shard's row sums with client i's added, weighted as the round's
      means weigh them (the bag's mean is over every client, by examples)."""
      if whole:
        return uploads
      count, (row_deltas, *bag_deltas) = result[2], result[3]
      added = (row_sums.add(uploads[0], row_deltas * self.table_weight(count), ids[i],
                            places[i], real[i]),
               row_sums.add(uploads[1], tf.ones_like(ids[i]), ids[i], places[i],
                            real[i]))
      if self.bagged:
        added += (bag_sums.add(uploads[2], bag_deltas[0] * count, *_clients_bag(bag, i)),)
      return added
    client_batches = client_data.shard_client_batches(shard)

    def train_client(i, totals):
      """Client i trained from the round's model, its result added."""
      tower, rows, keys, is_real, bag_keys = self.start(
          broadcast, self.shard_answer(broadcast, worker_rows, worker_bag, answer, places,
                                       bag, i))

      def step(index, state):
        batch = self.localized(client_data.shard_batch(shard, index), bag_keys)
        return index + 1, sgd_step(self.spec, state, batch, keys, is_real)

      _, state = tf.while_loop(
          lambda index, state: index < client_batches[i + 1], step,
          (client_batches[i], (tower, rows, tf.constant(0.0), tf.constant(0.0))))
      result = self.result(tower, rows, *state)
      return i + 1, self._add(broadcast, totals, result) + (
          with_uploads(totals[-1], i, result),)

    clients = tf.size(client_batches) - 1
    _, totals = tf.while_loop(lambda i, totals: i < clients, train_client,
                              (tf.constant(0), totals))
    sums, loss_total, examples, table_total, uploads = totals
    divisors = [examples] * len(broadcast[0]) + ([table_total] if whole else [])
    shared = tf.nest.pack_sequence_as(
        shared_part, [tf.math.divide_no_nan(total, d) for total, d in zip(sums, divisors)])
    if whole:
      return shared, loss_total, examples, table_total
    sums = uploads[:2]
    result = (shared, loss_total, examples,
              sums if self.table_bounds is None else self._by_range(shard_keys, *sums))
    return result + uploads[2:]

  def _by_range(self, shard_keys, sums, holders):
    """A shard's row sums and holders (on its keys, or on every row of the
    table) as a (keys, sums, holders) piece per range of `table_bounds`."""
    keys = tf.cond(tf.equal(tf.shape(sums)[0], self.num_rows),
                   lambda: tf.range(self.num_rows), lambda: shard_keys)
    splits = tf.searchsorted(keys, tf.constant(self.table_bounds, tf.int32))
    return tuple((keys[splits[i]:splits[i + 1]], sums[splits[i]:splits[i + 1]],
                  holders[splits[i]:splits[i + 1]]) for i in range(self.pieces))

  def _add(self, broadcast, totals, result):
    """The shard's running shared sums, loss sum, examples and table weight
    with a client's `result` added."""
    sums, loss_total, examples, table_total = totals[:4]
    shared, loss_sum, count = result[:3]
    weights = [count] * len(broadcast[0]) + (
        [self.table_weight(count)] if self.spec.whole_table else [])
    sums = tuple(total + w * d for total, w, d in zip(sums, weights,
                                                     tf.nest.flatten(shared)))
    return (sums, loss_total + loss_sum, examples + count,
            table_total + self.table_weight(count))

  def _summed_rows(self, rows):
    """The sum at the server of the clients' [R, D] rows, R the same on every
    client but unknown to the types (`federated_sum` takes known shapes)."""
    rows_type = rows.type_signature.member

    @tff.tensorflow.computation
    def empty():
      return tf.zeros((0,) + rows_type.shape[1:], rows_type.dtype)

    @tff.tensorflow.computation(rows_type, rows_type)
    def add(total, more):
      return tf.cond(tf.shape(total)[0] > 0, lambda: total + more, lambda: more)

    @tff.tensorflow.computation(rows_type)
    def identity(total):
      return tf.identity(total)

    return tff.federated_aggregate(rows, empty(), add, add, identity)

  def build(self, data_type) -> Any:
    """TFF: (broadcast @SERVER, [answers @CLIENTS,] data @CLIENTS) -> (mean
    dense delta (DP: sum), loss sum, examples @SERVER[, uploads @CLIENTS]);
    sharded, one struct: (broadcast @SERVER, the worker's class rows [and bag
    rows] @CLIENTS all equal, answers @CLIENTS, [bag keys @CLIENTS,] data
    @CLIENTS) ->
    (mean dense delta, loss sum, examples @SERVER, each shard's class row
    sums and holders @CLIENTS[, the call's bag sums @SERVER])."""
    private = self.spec.dp is not None  # Clipped deltas: summed, noised on the server.
    train = (tf.function(self.train_shard, autograph=False) if self.spec.sharded
             else self.train)
    broadcast_at_server = tff.FederatedType(self.broadcast_type, tff.SERVER)
    data_at_clients = tff.FederatedType(data_type, tff.CLIENTS)
    if self.spec.whole_table:
      @tff.tensorflow.computation(self.broadcast_type, data_type)
      def whole_update(broadcast, data):
        if self.spec.sharded:
          return train(broadcast, None, data)
        shared, loss_sum, count = train(broadcast, None, data)
        return shared, loss_sum, count, self.table_weight(count)

      @tff.federated_computation(broadcast_at_server, data_at_clients)
      def whole_round(broadcast, data):
        shared, loss_sum, count, table_weights = tff.federated_map(
            whole_update, (tff.federated_broadcast(broadcast), data))
        if private:
          return (tff.federated_zip((tff.federated_sum(shared[0]),
                                     tff.federated_sum(shared[1]))),
                  tff.federated_sum(loss_sum), tff.federated_sum(count))
        # Every client holds every row: with `holders`, a mean over clients.
        mean = tff.federated_zip((tff.federated_mean(shared[0], weight=count),
                                  tff.federated_mean(shared[1], weight=table_weights)))
        return mean, tff.federated_sum(loss_sum), tff.federated_sum(count)

      return whole_round

    answers_at_clients = tff.FederatedType(self.answer_type, tff.CLIENTS)

    def summed(results):
      shared, loss_sum, count = (results[i] for i in range(3))
      mean = tff.federated_zip(((tff.federated_sum(shared[0]) if private else
                                 tff.federated_mean(shared[0], weight=count)),))
      return mean, tff.federated_sum(loss_sum), tff.federated_sum(count)

    if self.spec.sharded:  # (No DP.)
      at_clients = [self.worker_rows_type] * self.pieces + (
          [self.worker_bag_type, answers_at_clients, self.bag_keys_type]
          if self.bagged else [answers_at_clients]) + [data_at_clients]

      @tff.tensorflow.computation(tff.StructWithPythonType(
          [self.broadcast_type] + [t.member for t in at_clients], tuple))
      def shard_update(args):
        broadcast, worker_rows = args[0], args[1:1 + self.pieces]
        rest = args[1 + self.pieces:]
        if self.bagged:
          worker_bag, answer, bag_keys, data = rest
          return train(broadcast, answer, data, worker_rows, worker_bag, bag_keys)
        answer, data = rest
        return train(broadcast, answer, data, worker_rows)

      @tff.federated_computation(tff.StructWithPythonType(
          [broadcast_at_server] + at_clients, tuple))
      def shard_round(args):
        results = tff.federated_map(shard_update, (tff.federated_broadcast(args[0]),) + tuple(
            args[i] for i in range(1, len(at_clients) + 1)))
        sums = ((results[3],) if self.table_bounds is None else
                tuple(results[3][i] for i in range(self.pieces)))
        return summed(results) + sums + (
            (self._summed_rows(results[4]),) if self.bagged else ())

      return shard_round

    @tff.tensorflow.computation(self.broadcast_type, self.answer_type, data_type)
    def client_update(broadcast, answer, data):
      return train(broadcast, answer, data)

    @tff.federated_computation(broadcast_at_server, answers_at_clients, data_at_clients)
    def client_round(broadcast, answers, data):
      results = tff.federated_map(
          client_update, (tff.federated_broadcast(broadcast), answers, data))
      return summed(results) + (results[3],)

    return client_round
