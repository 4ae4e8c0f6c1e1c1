"""The federated process of a model whose clients each hold a sub-model.

FedAwS and FedSS (and sampled global softmax for MovieLens) share one shape:
the model is a dense part (the "tower": every client receives all of it) and
an embedding table of which each client receives only the rows of its keys;
optionally the tower's first weight, an embedding bag over sparse features,
is selected the same way (`SelectedBag`: a client receives only the rows of
the features its points contain). A round (`SubModelProcess.next`; the
clients' TFF computations in `sub_model_clients`, the server's answers in
`sub_model_answers`):
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
shard of clients, their batches one client after another (a
`client_data.Shard`, sent as its arrays, not as a dataset's graph, which
the worker rebuilt in each computation that read it), as FedAvg's shards
(`client_shards`) are: step 1 returns each of the shard's clients' keys,
computed from that client's own examples, and with a bag the distinct bag
rows its clients read (each client's own bag keys stay in the worker for
step 2, `worker_values.invoke_holding`); the server answers the shard as
one (where its distinct keys are among the class rows its worker holds for
the round, its clients' keys, and which bag rows the call reads); step 2
trains the shard's clients one after another in one pass over its
batches, each from the round's model with its own rows (gathered from the
worker's by its keys' places among the shard's), and returns their
class-row deltas summed per row with how many clients held each (on the
shard's distinct rows), their bag deltas summed over the call's shards in
TFF (on the call's rows), each as an array of the table's shape instead
when those rows are most of it, and their tower deltas' mean. The round is
the one of a TFF client each (tested, to rounding) without TFF's cost per
client call, twice a round: on `xc_small`, 100 clients a round, a FedAwS
round took 0.70 s instead of 1.33.

A round's TFF calls take at most `MAX_CLIENTS_PER_CALL` clients, the server
folding each call's uploads into per-row sums as it returns
(`row_sums.RowSums`, for the class rows and the bag's), so a round of
thousands of clients holds one call's answers and uploads at a time. What a
worker's calls read of the class table and the bag goes to it once a round,
each row once, as values it holds (`sub_model_answers.RoundRows`,
`worker_values`), and so does each call's data (step 1 computes the call's
keys from it, step 2 trains on it); every value goes as the bytes of its
request, each array copied once (`value_bytes`). With table servers
(`served_table.use_table_servers`; sharded, the rows trained by their means
alone, as FedSS's are), the class table is theirs in ranges: a worker's
class rows come from them as a piece per range, and each call leaves its
shards' sums of each range's rows in the worker for that range's server to
fold, in the calls' order, the driver folding the bag's alone. On several
workers (`tff_runtime.worker_contexts`) call i goes to worker i mod their
number, each worker receiving only its clients' answers and data: the
calls, and so the results, are one worker's (tested bit for bit); a round
of one call runs on the first worker.

Why the server's side runs in Python and not in TFF (measured here, TFF 0.87):
`tff.federated_select` passes the whole table into each key's selection (~10
ms a key at [200k, 64] against 0.23 ms at [20k, 64]), and `federated_aggregate`
keeps every client's accumulator alive (+50 MB a client at [200k, 64]), so the
server's work and memory grew with clients x table. Here it is O(rows touched)
per client, and the TFF worker only ever holds the clients' sub-models.

The rows take a plain mean times `row_learning_rate` (FedAvg's server step:
SGD at that rate; 1 is FedAvg's), not the server optimizer: a stateful
optimizer (momentum, Adam) would keep moving rows that no client held this
round. Which mean (`row_mean`):
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

import concurrent.futures
import dataclasses
import functools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import optimizers
from fed_retrieval.algorithms import row_sums
from fed_retrieval.algorithms import served_table
from fed_retrieval.algorithms import sub_model_answers
from fed_retrieval.algorithms import sub_model_clients
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.runtime import worker_values
from tasks import client_data

ROW_MEANS = ("holders", "clients")
# A TFF call of a round takes at most this many clients (a shard of more
# alone): a round of thousands holds one call's answers and uploads at a
# time, its row deltas summed as the calls return (FedAwS at Amazon-670K's
# shape, 4,000 clients a round in one call, was killed for memory here).
# Fewer, larger calls cost the driver less (each call's bag sums come back
# whole: 35 MB at that shape), and the papers' 4,000 clients make 6 calls
# of 667, as many on each of 1, 2, 3 or 6 workers. FedAwS beside 3 shards,
# the one-call line of `make benchmark-round-cost`, one sitting each: with
# 8 calls of 500 (floor 3/8 on 3 workers) the driver took 0.91-0.93 CPU s a
# round, one worker 11.4, the busiest of three 0.458x; with 12 of 334 (floor
# 1/3) 1.23-1.32, 12.2 and 0.384x, the driver 0.124 of the round modelled
# at N = 3; with 6 of 667, 0.84-0.86, 11.2 and 0.351x, the tree as with 500.
MAX_CLIENTS_PER_CALL = 700
FLOAT_BYTES = 4
KEY_BYTES = 4
# (a client's examples: its batches as one batch, round seed [2] int64: (seed,
# round)) -> (keys [K] int32, is_real [K] bool).
ClientKeysFn = Callable[[Any, tf.Tensor], Tuple[tf.Tensor, tf.Tensor]]
# (tower weights, rows [K, D], keys [K], is_real [K], batch) -> scalar loss.
ClientLossFn = Callable[[List[tf.Tensor], tf.Tensor, tf.Tensor, tf.Tensor, Any],
                        tf.Tensor]
# (the table the last round ended with, this round's table after its row
# means, the rows those changed) -> the table after the step (the second is
# the round's own copy: the step may change it in place and return it).
TableStepFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


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
  # The server's rate on the rows' mean delta (FedAvg's: 1), see the docstring.
  row_learning_rate: float = 1.0
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


@dataclasses.dataclass
class _RoundSums:
  """What a round's clients give the server: the broadcast's mean delta (DP:
  sum) as a list of tower arrays, loss sum, examples, and the table's delta
  (`whole_table`) or the row sums of the class rows and of the bag."""
  mean: List[np.ndarray]
  loss_sum: float
  count: float
  table_delta: Optional[np.ndarray] = None
  rows: Optional[row_sums.RowSums] = None
  bag: Optional[row_sums.RowSums] = None


def _calls(sizes: Sequence[int], most: int) -> List[Tuple[int, int]]:
  """Consecutive TFF clients of `sizes` clients each grouped into calls of at
  most `most` clients (a TFF client larger than that alone): [(start, end)]."""
  calls, start, held = [], 0, 0
  for i, size in enumerate(sizes):
    if i > start and held + size > most:
      calls.append((start, i))
      start, held = i, 0
    held += size
  return calls + [(start, len(sizes))] if sizes else calls


def _in_waves(contexts: Sequence[Any], count: int, run: Callable[[Any, int], Any]):
  """`run(context, i)` of calls i < `count`, yielded in their order. On
  several workers (`contexts`), call i goes to worker i mod their number, a
  call a worker at once: the calls and their order are those of one worker,
  so are the results, and memory holds one call a worker."""
  if len(contexts) <= 1:
    for i in range(count):
      yield run(contexts[0] if contexts else None, i)
    return
  with concurrent.futures.ThreadPoolExecutor(len(contexts)) as pool:
    for first in range(0, count, len(contexts)):
      wave = [pool.submit(run, context, i)
              for context, i in zip(contexts, range(first, count))]
      for future in wave:
        yield future.result()


def _combined(parts: Sequence[Tuple[List[np.ndarray], float]], summed: bool
              ) -> List[np.ndarray]:
  """The round's mean (`summed`: sum) of the calls' (mean or sum, examples):
  example-weighted across calls; one call's as it is."""
  if len(parts) == 1:
    return parts[0][0]
  if summed:
    return [sum(column) for column in zip(*(p[0] for p in parts))]
  total = sum(count for _, count in parts)
  return [sum(d * (count / max(total, 1e-12)) for d, count in
              zip(column, (c for _, c in parts))).astype(np.float32)
          for column in zip(*(p[0] for p in parts))]


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
    num_rows, dim = spec.initial_table.shape
    self._num_rows, self._dim = num_rows, dim
    self._bag_rows, self._bag_dim = shapes[0] if self._bagged else (0, 0)
    servers = served_table.table_servers()
    if servers and (not spec.sharded or not spec.trains_rows or spec.whole_table
                    or spec.table_step is not None):
      raise ValueError(f"--{served_table.FLAG}: the class table is served for sharded "
                       "rounds whose rows train by their means alone (FedSS, or FedAwS "
                       "without its spreadout step)")
    # The class table on servers (`served_table`), or here.
    self._served = (served_table.ServedTable(servers, num_rows, spec.row_mean)
                    if servers else None)
    # The round's sums, kept across rounds (`row_sums.RowSums`).
    self._row_sums = (row_sums.RowSums(num_rows, dim, spec.row_mean)
                      if spec.trains_rows and not spec.whole_table and not servers
                      else None)
    self._bag_sums = (row_sums.RowSums(self._bag_rows, self._bag_dim, "clients")
                      if self._bagged else None)
    self._optimizer = optimizers.tff_optimizer(
        spec.server_optimizer, spec.server_learning_rate, "server_optimizer")
    # The server's step on the tower as one graph: Adam on xc_small's tower
    # (a 20,000-row bag) 25-27 ms a round, against 33-35 ms op by op.
    self._tower_step = tf.function(
        lambda state, weights, mean_deltas: self._optimizer.next(
            state, weights, [-d for d in mean_deltas]))
    self._initial_tower = [np.asarray(w, np.float32) for w in spec.initial_tower]
    self._initial_table = np.asarray(spec.initial_table, np.float32)
    # A client's batches, or a shard's arrays (`client_data.Shard`).
    data_type = (tff.types.tensorflow_to_type(client_data.shard_spec(
        tff.types.type_to_tf_tensor_specs(tff.types.to_type(spec.batch_type))))
                 if spec.sharded else tff.SequenceType(spec.batch_type))
    self._data_type = tff.FederatedType(data_type, tff.CLIENTS)
    if not spec.whole_table:
      self.client_keys = sub_model_clients.build_client_keys(spec, data_type)
    self._round = sub_model_clients.ClientRound(
        spec, shapes[1:] if self._bagged else shapes, num_rows, dim, self._bag_dim,
        self._served.bounds if self._served else None)
    self.client_round = self._round.build(data_type)

  def initialize(self) -> Dict[str, Any]:
    return {"tower": [w.copy() for w in self._initial_tower],
            "table": self._initial_table.copy(),
            "optimizer": _numpy(self._optimizer.initialize(
                [tf.TensorSpec(w.shape, tf.float32) for w in self._initial_tower])),
            "round": np.int64(0)}

  def _clients(self, state, client_data_, round_num: int) -> "_RoundSums":
    """The round's client work, at most `MAX_CLIENTS_PER_CALL` clients a TFF
    call: each call's data sent to its worker once (`_sent`), then each call
    trained (`_call`), folded into the round's sums as it returns."""
    spec = self._spec
    dense = list(state["tower"][1:] if self._bagged else state["tower"])
    if spec.sharded:  # Sent as arrays (`client_data.Shard`), not dataset graphs.
      client_data_ = [client_data.shard_arrays(d) for d in client_data_]
    if spec.whole_table:
      mean, loss_sum, count = self.client_round((dense, state["table"]), client_data_)
      return _RoundSums([np.asarray(d) for d in mean[0]], float(loss_sum), float(count),
                        np.asarray(mean[1]))
    contexts = tff_runtime.worker_contexts()
    calls = _calls([client_data.shard_clients(d) for d in client_data_] if spec.sharded
                   else [1] * len(client_data_), MAX_CLIENTS_PER_CALL)
    seed = np.array([spec.seed, round_num], np.int64)
    sent = list(_in_waves(contexts, len(calls), lambda context, i: self._sent(
        context, client_data_[slice(*calls[i])], seed)))
    keys = [k for _, call_keys, _ in sent for k in call_keys]
    for sums in self._row_sums, self._bag_sums:
      if sums is not None:
        sums.clear()
    work = _RoundSums([], 0.0, 0.0, rows=self._row_sums, bag=self._bag_sums)
    parts = []
    workers = max(len(contexts), 1)
    if self._served is not None:
      self._served.ensure(state["table"])
      make_rows = functools.partial(self._served.worker_rows,
                                    type_spec=self._round.worker_rows_type)
    else:
      make_rows = sub_model_answers.table_rows(state["table"],
                                               self._round.worker_rows_type)
    class_rows = (sub_model_answers.RoundRows(
        self._num_rows, make_rows, [np.asarray(k[0]) for k in keys], calls, workers)
                  if spec.sharded else None)
    bags = (sub_model_answers.RoundRows(
        self._bag_rows, sub_model_answers.table_rows(np.asarray(state["tower"][0]),
                                                     self._round.worker_bag_type),
        [np.asarray(k[2]) for k in keys], calls, workers)
            if spec.sharded and self._bagged else None)
    for round_rows in class_rows, bags:  # In turn, before the calls' threads start.
      if round_rows is not None:
        round_rows.make_all(contexts)

    def run(context, i):
      start, end = calls[i]
      return self._call(context, state, dense, keys[start:end], sent[i][0],
                        class_rows.of_call(i, context) if class_rows else None,
                        bags.of_call(i, context) if bags else None, sent[i][2])

    for mean, loss_sum, count, rows, bag in _in_waves(contexts, len(calls), run):
      parts.append(([np.asarray(d) for d in mean[0]], float(count)))
      work.loss_sum += float(loss_sum)
      work.count += float(count)
      if self._served is not None:  # The class rows' sums, left in the worker.
        self._served.fold(*rows, weight=float(count))
        rows = None
      for sums, uploads in (work.rows, rows), (work.bag, bag):
        for part in uploads if sums is not None else ():
          sums.add(part)
    work.mean = _combined(parts, summed=spec.dp is not None)
    return work

  def _sent(self, context, client_data_, seed: np.ndarray
            ) -> Tuple[Any, List[Any], Optional[Any]]:
    """(a call's data made in the worker behind `context` for the call's
    training, the keys of each of its TFF clients computed there from it,
    sharded with a bag the clients' bag keys left there for the training):
    its data crosses to the worker once a round, not once for its keys and
    again to train, and the worker holds its calls' data for the round (a
    share of what the driver holds). A client's keys depend on its data and
    the round alone."""
    clients = len(client_data_)
    data = worker_values.created(context, client_data_, self._data_type, clients)
    if self._round.call_bag:  # The clients' bag keys stay for their training.
      keys, bag_keys = worker_values.invoke_holding(context, self.client_keys, clients,
                                                    seed, data)
      return data, list(keys), bag_keys
    return data, list(worker_values.invoke(context, self.client_keys, seed, data)), None

  def _call(self, context, state, dense, keys, client_data_,
            worker_rows: Optional[sub_model_answers.WorkerRows],
            worker_bag: Optional[sub_model_answers.WorkerRows], bag_keys=None):
    """One TFF call, in `context` (None: the default), of the round's clients
    whose keys (per TFF client: a client or a shard) are `keys` and data
    `client_data_` (the call's value in its worker, `_sent`), sharded reading
    its class rows from `worker_rows` and with a bag the rows of `worker_bag`
    by its clients' `bag_keys` (in the worker, `_sent`), both held by its
    worker: (the mean (DP: sum) of the broadcast's deltas, loss
    sum, examples, the class rows' and the bag's uploads, each a list of
    `RowParts` (a shard's class rows a part) or None if not trained; with
    a served table, the class rows' are (`context`, the call's TFF clients,
    its sums of each server's rows, left in the worker) for
    `ServedTable.fold`)."""
    spec = self._spec
    if spec.sharded:
      answers, call_bag = sub_model_answers.shard_answers(keys, worker_rows, worker_bag)
      broadcast = (dense,) + (() if call_bag is None else
                              ((call_bag.keys, call_bag.in_worker),))
      args = (broadcast, *(worker_rows.rows if self._served else [worker_rows.rows]),
              *(() if call_bag is None else (worker_bag.rows,)), answers,
              *(() if call_bag is None else (bag_keys,)), client_data_)
      if self._served is not None:
        pieces = range(3, 3 + self._round.pieces)
        outputs, held = worker_values.invoke_keeping(context, self.client_round,
                                                     len(keys), pieces, *args)
        outputs = outputs[:3] + [None] + outputs[3:]  # The bag's sums stay 5th.
      else:
        outputs = worker_values.invoke(context, self.client_round, *args)
      mean, loss_sum, count = outputs[:3]
      # The weights' sum, the call's examples, goes with its first part.
      weights = [[float(count)]] + [[]] * (len(answers) - 1)
      rows = ((context, len(keys), held) if self._served is not None else
              [sub_model_answers.sums_part(answer[3], sums, part_weights, self._num_rows,
                                           holders)
               for answer, (sums, holders), part_weights in zip(answers, outputs[3],
                                                                weights)])
      bag = ([sub_model_answers.sums_part(call_bag.keys, outputs[4], weights[0],
                                           self._bag_rows)] if self._bagged else None)
      return mean, loss_sum, count, rows if spec.trains_rows else None, bag
    answers = sub_model_answers.answers(state, keys, self._bagged)
    mean, loss_sum, count, uploads = worker_values.invoke(
        context, self.client_round, (dense,), answers, client_data_)
    # Per client: rows, [bag rows,] count.
    weights = [float(u[-1]) for u in uploads]
    rows = sub_model_answers.client_parts(
        [a[1] for a in answers], [u[0] for u in uploads], [a[2] for a in answers],
        weights, spec.row_mean == "clients")
    bag = (sub_model_answers.client_parts(
        [a[4] for a in answers], [u[1] for u in uploads],
        [np.ones(len(a[4]), bool) for a in answers], weights, scaled=True)
           if self._bagged else None)
    return (mean, loss_sum, count, [rows] if spec.trains_rows else None,
            None if bag is None else [bag])

  def _server_step(self, state, work: "_RoundSums", round_num: int):
    """The new tower and table: DP noise on the dense means, the bag's mean
    over every client (`RowSums.mean`), the server optimizer on the tower, each
    class row's mean delta (`row_sums.RowSums`), then the table step."""
    spec = self._spec
    mean_tower, table_delta = work.mean, work.table_delta
    if spec.dp is not None:  # Sums of clipped updates -> their noised mean.
      noised = spec.dp.noised_mean(
          mean_tower + ([table_delta] if spec.whole_table else []), (spec.seed, round_num))
      mean_tower = noised[:len(mean_tower)]
      table_delta = noised[-1] if spec.whole_table else None
    if self._bagged:  # The bag's mean delta over every client, zeros where absent.
      mean_tower = [work.bag.mean()] + mean_tower
    optimizer_state, tower = self._tower_step(state["optimizer"], state["tower"],
                                              mean_tower)
    table = state["table"]
    if spec.trains_rows and self._served is not None:
      table = self._served.step(spec.row_learning_rate)
    elif spec.trains_rows:
      table = table.copy()
      if spec.whole_table:
        table += spec.row_learning_rate * table_delta
        updated = np.arange(len(table), dtype=np.int32)
      else:
        updated = work.rows.add_means(table, spec.row_learning_rate)
      if spec.table_step is not None:
        table = spec.table_step(state["table"], table, updated)
    return {"tower": list(tower), "table": table, "optimizer": optimizer_state,
            "round": np.int64(round_num)}

  def next(self, state, client_data_) -> tff.learning.templates.LearningProcessOutput:
    round_num = int(state["round"]) + 1
    work = self._clients(state, client_data_, round_num)
    metrics = {"client_work": {"train": {"loss": work.loss_sum / max(work.count, 1.0),
                                         "num_examples": work.count}}}
    return tff.learning.templates.LearningProcessOutput(
        self._server_step(state, work, round_num), metrics)

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
