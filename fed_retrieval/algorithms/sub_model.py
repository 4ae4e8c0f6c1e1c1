"""The federated process of a model whose clients each hold a sub-model.

FedAwS and FedSS (and sampled global softmax for MovieLens) share one shape:
the model is a dense part (the "tower": every client receives all of it) and
an embedding table of which each client receives only the rows of its keys;
optionally the tower's first weight, an embedding bag over sparse features,
is selected the same way (`SelectedBag`: a client receives only the rows of
the features its points contain). A round (`SubModelProcess.next`; the clients' TFF computations in
`sub_model_clients`, the server's answers in `sub_model_answers`):
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
from fed_retrieval.algorithms import sub_model_answers
from fed_retrieval.algorithms import sub_model_clients
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
# (the table the last round ended with, this round's table after its row
# means, the rows those changed) -> the table after the step.
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
    num_rows, dim = spec.initial_table.shape
    self._optimizer = optimizers.tff_optimizer(
        spec.server_optimizer, spec.server_learning_rate, "server_optimizer")
    # The server's step on the tower as one graph: Adam on xc_small's tower
    # (a 20,000-row bag) 25-27 ms a round, against 33-35 ms op by op.
    self._tower_step = tf.function(
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
      self.client_keys = sub_model_clients.build_client_keys(spec, data_type)
    self.client_round = sub_model_clients.ClientRound(
        spec, shapes[1:] if self._bagged else shapes, num_rows, dim,
        shapes[0][1] if self._bagged else 0).build(data_type)

  def initialize(self) -> Dict[str, Any]:
    return {"tower": [w.copy() for w in self._initial_tower],
            "table": self._initial_table.copy(),
            "optimizer": _numpy(self._optimizer.initialize(
                [tf.TensorSpec(w.shape, tf.float32) for w in self._initial_tower])),
            "round": np.int64(0)}

  def _clients(self, state, client_data_, round_num: int):
    """The round's client work: (each client's keys, the mean (DP: sum) of the
    broadcast's deltas, loss sum, examples, each client's uploads)."""
    spec = self._spec
    dense = state["tower"][1:] if self._bagged else state["tower"]
    if spec.whole_table:
      mean, loss_sum, count = self.client_round((list(dense), state["table"]),
                                                client_data_)
      return None, mean, loss_sum, count, None
    seed = np.array([spec.seed, round_num], np.int64)
    if not spec.sharded:
      keys = self.client_keys(seed, client_data_)
      mean, loss_sum, count, uploads = self.client_round(
          (list(dense),), sub_model_answers.answers(state, keys, self._bagged),
          client_data_)
      return keys, mean, loss_sum, count, uploads
    shard_keys = self.client_keys(seed, client_data_)
    bag_sizes = [np.asarray(k[-1]) if self._bagged else np.zeros(0, np.int32)
                 for k in shard_keys]
    keys = [k[:3] for k in sub_model_answers.split_clients(shard_keys, bag_sizes)]
    mean, loss_sum, count, shard_uploads = self.client_round(
        (list(dense),), sub_model_answers.pack(
            sub_model_answers.answers(state, keys, self._bagged),
            [len(k[0]) for k in shard_keys], self._bagged), client_data_)
    return (keys, mean, loss_sum, count,
            sub_model_answers.split_clients(shard_uploads, bag_sizes))

  def _server_step(self, state, keys, mean, uploads, round_num: int):
    """The new tower and table: DP noise on the dense means, the bag's mean
    over every client, the server optimizer on the tower, each class row's
    mean delta (`row_means`), then the table step."""
    spec = self._spec
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
    optimizer_state, tower = self._tower_step(state["optimizer"], state["tower"],
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
        table = spec.table_step(state["table"], table, updated)
    return {"tower": list(tower), "table": table, "optimizer": optimizer_state,
            "round": np.int64(round_num)}

  def next(self, state, client_data_) -> tff.learning.templates.LearningProcessOutput:
    round_num = int(state["round"]) + 1
    keys, mean, loss_sum, count, uploads = self._clients(state, client_data_, round_num)
    total = float(count)
    metrics = {"client_work": {"train": {"loss": float(loss_sum) / max(total, 1.0),
                                         "num_examples": total}}}
    return tff.learning.templates.LearningProcessOutput(
        self._server_step(state, keys, mean, uploads, round_num), metrics)

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
