"""A sub-model round split into several TFF calls (`sub_model.MAX_CLIENTS_PER_CALL`)
trains as one call does, on one worker or spread over three, and `RowSums`
(the class rows' and the bag's) fold calls as one sum would."""

import collections

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.algorithms import row_sums
from fed_retrieval.algorithms import served_table
from fed_retrieval.algorithms import sub_model
from fed_retrieval.algorithms import sub_model_answers
from fed_retrieval.algorithms import sub_model_clients
from fed_retrieval.algorithms.differential_privacy import DPConfig
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.runtime import array_service
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.runtime import worker_values
from fed_retrieval.training import round_calls
from tasks.xc import family as xc_family
from tasks.xc import xc_task
from tests.configs import xc_settings_of

# One pytest-xdist worker (`make test`'s --dist loadgroup) makes `three_workers`.
pytestmark = pytest.mark.xdist_group("sub_model_calls")


NO_WORKER = object()  # A context that cannot hold values: the arrays themselves.


def test_a_workers_class_and_bag_rows_go_once_and_each_shard_and_call_names_its_own():
  """Three shards, a call each, over two workers: worker 0's calls (0 and 2)
  share one set of bag rows and one of class rows, the union of what their
  shards read, each made once; each call names its bag rows among the
  worker's, in order, and their keys; each shard's answer says where its
  distinct class keys are among the worker's class rows, with its clients'
  keys and is_real, and those distinct keys, among which each client finds
  its rows."""
  bag = np.arange(20, dtype=np.float32).reshape(10, 2)
  table = np.arange(12, dtype=np.float32).reshape(6, 2)
  shard_keys = [  # (class keys [n, K], is_real [n, K], the shard's distinct bag rows).
      (np.array([[0, 5], [2, 2]]), np.array([[True, True], [True, False]]),
       np.array([1, 4, 7, 9])),
      (np.array([[3, 0]]), np.array([[True, True]]), np.array([1, 7, 8])),
      (np.array([[5, 4]]), np.array([[True, False]]), np.array([2, 4]))]
  calls = [(0, 1), (1, 2), (2, 3)]
  bags = sub_model_answers.RoundRows(len(bag), sub_model_answers.table_rows(bag, None),
                                     [k[2] for k in shard_keys], calls, 2)
  class_rows = sub_model_answers.RoundRows(
      len(table), sub_model_answers.table_rows(table, None), [k[0] for k in shard_keys],
      calls, 2)
  first, first_rows = bags.of_call(0, NO_WORKER), class_rows.of_call(0, NO_WORKER)
  assert bags.of_call(2, NO_WORKER) is first
  assert class_rows.of_call(2, NO_WORKER) is first_rows
  np.testing.assert_array_equal(first.keys, [1, 2, 4, 7, 9])  # Shards 0 and 2.
  np.testing.assert_array_equal(first.rows, bag[[1, 2, 4, 7, 9]])
  np.testing.assert_array_equal(first_rows.keys, [0, 2, 4, 5])
  np.testing.assert_array_equal(first_rows.rows, table[[0, 2, 4, 5]])
  np.testing.assert_array_equal(bags.of_call(1, NO_WORKER).keys, [1, 7, 8])
  np.testing.assert_array_equal(class_rows.of_call(1, NO_WORKER).keys, [0, 3])
  answers, call_bag = sub_model_answers.shard_answers(shard_keys[::2], first_rows, first)
  np.testing.assert_array_equal(call_bag.keys, [1, 2, 4, 7, 9])
  np.testing.assert_array_equal(first.rows[call_bag.in_worker], bag[[1, 2, 4, 7, 9]])
  for answer, keys, rows in zip(answers, shard_keys[::2], ([0, 2, 5], [4, 5])):
    assert len(answer) == 4  # Places, keys, is_real, distinct rows: no bag.
    np.testing.assert_array_equal(first_rows.rows[answer[0]], table[rows])
    np.testing.assert_array_equal(answer[1], keys[0])
    np.testing.assert_array_equal(answer[2], keys[1])
    np.testing.assert_array_equal(answer[3], rows)
    places = np.searchsorted(answer[3], keys[0])  # Each client's rows by its keys.
    np.testing.assert_array_equal(first_rows.rows[answer[0][places]], table[keys[0]])
  assert sub_model_answers.shard_answers(shard_keys[1:2], first_rows)[1] is None


class _Context:
  """A context that cannot hold values, named to see where a bag was made."""

  def __init__(self, name):
    self.name = name


def test_every_workers_bag_is_made_at_once_in_the_context_its_calls_run_in(monkeypatch):
  made = []
  monkeypatch.setattr(sub_model_answers.worker_values, "created",
                      lambda context, value, type_spec, clients: made.append(
                          (context.name, clients)) or value)
  bag = np.arange(20, dtype=np.float32).reshape(10, 2)
  calls = [(0, 1), (1, 2), (2, 3), (3, 5)]  # The last call has two TFF clients.
  bags = sub_model_answers.RoundRows(len(bag), sub_model_answers.table_rows(bag, None),
                                     [np.array([i]) for i in range(5)], calls, 2)
  bags.make_all([_Context("first"), _Context("second")])
  # Worker 0: calls 0 and 2 (one client each); worker 1: call 1, and call 3 of
  # another client count, so a bag of its own.
  assert made == [("first", 1), ("second", 1), ("second", 2)]
  bags.of_call(3, None)
  assert len(made) == 3  # Already made: not again.


@pytest.mark.parametrize("sizes,most,calls", [
    ([1] * 5, 2, [(0, 2), (2, 4), (4, 5)]),
    ([3, 4, 1, 2], 5, [(0, 1), (1, 3), (3, 4)]),
    ([7, 1], 5, [(0, 1), (1, 2)]),  # A shard larger than a call goes alone.
    ([1] * 3, 500, [(0, 3)]),
    ([], 5, [])])
def test_calls_group_consecutive_clients_up_to_the_most(sizes, most, calls):
  assert sub_model._calls(sizes, most) == calls  # pylint: disable=protected-access


def held_means(sums: row_sums.RowSums, num_rows: int, dim: int):
  """(the rows held, their mean deltas), as `add_means` adds them to a table
  of zeros."""
  table = np.zeros((num_rows, dim), np.float32)
  ids = sums.add_means(table, 1.0)
  return ids, table[ids]


@pytest.mark.parametrize("row_mean", ["holders", "clients"])
def test_row_sums_added_in_parts_equal_one_sum_by_hand(row_mean):
  keys = [np.array([3, 1]), np.array([1, 5]), np.array([3, 0])]
  real = [np.array([True, True]), np.array([True, False]), np.array([True, True])]
  deltas = [np.full((2, 2), v, np.float32) for v in (1.0, 2.0, 4.0)]
  weights = [1.0, 3.0, 2.0]
  scaled = row_mean == "clients"
  one_by_one, summed = row_sums.RowSums(6, 2, row_mean), row_sums.RowSums(6, 2, row_mean)
  for sums in (one_by_one, summed):
    sums.add(sub_model_answers.client_parts(keys[:1], deltas[:1], real[:1], weights[:1],
                                            scaled))
  one_by_one.add(sub_model_answers.client_parts(keys[1:], deltas[1:], real[1:],
                                                weights[1:], scaled))
  # Clients 1 and 2 summed before they arrive, as a shard sums its bag's rows:
  # rows 0, 1, 3 (5 not real), one holder each.
  by_row = [4.0 * 2, 2.0 * 3, 4.0 * 2] if scaled else [4.0, 2.0, 4.0]
  summed.add(row_sums.RowParts(
      [np.array([0, 1, 3])], [np.repeat(np.array(by_row, np.float32)[:, None], 2, 1)],
      [np.ones(3, np.int64)], weights[1:]))
  ids, means = held_means(one_by_one, 6, 2)
  summed_ids, summed_means = held_means(summed, 6, 2)
  np.testing.assert_array_equal(summed_ids, ids)
  np.testing.assert_allclose(summed_means, means, rtol=1e-6)
  # Row 0: client 2; row 1: clients 0, 1; row 3: clients 0, 2; row 5 not real.
  if row_mean == "holders":
    expected = {0: 4.0, 1: (1 + 2) / 2, 3: (1 + 4) / 2}
  else:  # Example-weighted sums over the round's total weight, 6.
    expected = {0: 4 * 2 / 6, 1: (1 * 1 + 2 * 3) / 6, 3: (1 * 1 + 4 * 2) / 6}
  assert list(ids) == sorted(expected)
  np.testing.assert_allclose(means[:, 0], [expected[i] for i in ids], rtol=1e-6)
  np.testing.assert_array_equal(means[:, 0], means[:, 1])


@pytest.mark.parametrize("row_mean", ["holders", "clients"])
def test_a_shards_stacked_uploads_are_its_clients_parts_to_the_bit(row_mean):
  """A shard's clients' uploads as one part ([n, K] keys, [n, K, D] deltas)
  give the sums of the same clients' parts one by one, bit for bit."""
  rng = np.random.default_rng(3)
  shards = [(rng.integers(0, 9, (n, 4)), rng.normal(size=(n, 4, 3)).astype(np.float32),
             rng.random((n, 4)) < 0.7, rng.integers(1, 20, n).astype(np.float32))
            for n in (5, 3)]
  scaled = row_mean == "clients"
  stacked, one_by_one = row_sums.RowSums(9, 3, row_mean), row_sums.RowSums(9, 3, row_mean)
  stacked.add(sub_model_answers.client_parts(*zip(*shards), scaled))
  one_by_one.add(sub_model_answers.client_parts(
      *[[row for shard in shards for row in shard[field]] for field in range(4)], scaled))
  for got, want in zip(held_means(stacked, 9, 3), held_means(one_by_one, 9, 3)):
    np.testing.assert_array_equal(got, want)
  assert held_means(stacked, 9, 3)[0].size > 5  # Rows held, each a mean of several.


def test_the_dense_mean_is_the_clients_means_with_zeros_and_clearing_starts_anew():
  """The bag's mean (`mean`: parts whose holders are not counted, a call's)
  is the `clients` means of the rows held, zeros on rows nobody read; after
  `clear`, the same parts give the same sums as fresh `RowSums` do."""
  rng = np.random.default_rng(0)
  parts = [row_sums.RowParts([np.array(k)], [rng.normal(size=(len(k), 3))
                                                      .astype(np.float32)], [], [w])
           for k, w in (([4, 1, 2], 2.0), ([1, 3], 0.5), ([2, 4, 0, 1], 1.5))]
  dense, sparse = row_sums.RowSums(6, 3, "clients"), row_sums.RowSums(6, 3, "clients")
  for part in parts:
    dense.add(part)
    sparse.add(part._replace(holders=[np.ones(len(part.keys[0]), np.int64)]))
  ids, means = held_means(sparse, 6, 3)
  first = dense.mean()
  dense.clear()
  dense.add(parts[1])
  np.testing.assert_array_equal(dense.mean()[[1, 3]], parts[1].sums[0] / np.float32(0.5))
  np.testing.assert_array_equal(dense.mean()[[0, 2, 4, 5]], 0.0)
  dense.clear()
  for part in parts:
    dense.add(part)
  np.testing.assert_array_equal(dense.mean(), first)
  expected = np.zeros((6, 3), np.float32)
  expected[ids] = means
  np.testing.assert_array_equal(dense.mean(), expected)
  np.testing.assert_array_equal(dense.mean()[5], 0.0)
  np.testing.assert_allclose(dense.mean()[3], parts[1].sums[0][1] / 4.0, rtol=1e-6)


def build(task, config, algorithm):
  """The task's sub-model process of `algorithm` under `config`."""
  return xc_family.build_process(task, xc_family.model_config_for(task, config),
                                 config, algorithm)


def two_rounds(process, task, config, shards):
  """The trainable weights after two rounds of the task's first 6 clients
  (`process` is called again: it keeps no state between calls)."""
  state = process.initialize()
  for round_num in range(2):
    state = process.next(state, round_calls.round_datasets(
        task.clients, task.clients.client_ids[:6], config.loop, round_num, shards)).state
  return ([np.asarray(w) for w in process.get_model_weights(state).trainable],
          process.get_model_weights(process.initialize()).trainable)


def settings(partition, shards, row_mean="holders", dp=None):
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(
      synthetic="xc_tiny", partition=partition, labels_per_client=3))
  # A dense layer behind the bag, and server SGD (Adam's first steps would
  # hide a wrongly weighted mean of it).
  server = dict(server_optimizer="sgd", server_learning_rate=1.0)
  return task, xc_settings_of(
      task.config, fedss=FedSSConfig(num_negatives=5, row_mean=row_mean, **server),
      fedaws=FedAwSConfig(**server), clients_per_round=6, client_shards=shards,
      architecture="small", dp=dp)


@pytest.mark.parametrize("algorithm,partition,shards", [
    ("fedss", "k_labels_per_client", 0), ("fedss", "k_labels_per_client", 3),
    ("fedaws", "one_label_per_client", 0), ("fedaws", "one_label_per_client", 3)])
def test_a_round_in_several_calls_trains_as_one_call(tff_context, monkeypatch, algorithm,
                                                      partition, shards):
  """Two rounds of 6 clients (2 a call, or 2 a shard and a shard a call) give
  the weights one call gives, to float rounding: the tower's mean weighted
  by each call's examples, the rows' and the bag's sums folded call by call."""
  task, config = settings(partition, shards)
  process = build(task, config, algorithm)
  one, initial = two_rounds(process, task, config, shards)
  monkeypatch.setattr(sub_model, "MAX_CLIENTS_PER_CALL", 2)
  several, _ = two_rounds(process, task, config, shards)
  for a, b in zip(one, several):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
  assert any(np.any(a != b) for a, b in zip(one, initial))


@pytest.fixture(scope="module")
def three_workers():
  """Contexts of three TFF workers of their own."""
  workers = [tff_runtime.LocalWorker() for _ in range(3)]
  contexts = [tff_runtime.worker_context(worker.start()) for worker in workers]
  yield contexts
  for worker in workers:
    worker.stop()


@pytest.mark.parametrize("algorithm,partition,shards,row_mean,dp", [
    ("fedaws", "one_label_per_client", 3, "holders", None),
    ("fedss", "k_labels_per_client", 3, "holders", None),
    ("fedss", "k_labels_per_client", 0, "clients", None),
    ("fedaws", "one_label_per_client", 0, "holders",
     DPConfig(noise_multiplier=0.5, clip_norm=0.1))])
def test_calls_spread_over_three_workers_train_as_on_one(
    tff_context, three_workers, monkeypatch, algorithm, partition, shards, row_mean, dp):
  """Each worker takes every third call, its clients' answers and data: the
  weights equal one worker's, bit for bit (DP: the same noise too)."""
  monkeypatch.setattr(sub_model, "MAX_CLIENTS_PER_CALL", 2)
  task, config = settings(partition, shards, row_mean, dp)
  process = build(task, config, algorithm)
  one, initial = two_rounds(process, task, config, shards)
  calls = collections.Counter()

  class Counted:
    def __init__(self, worker, context):
      self.worker, self.context = worker, context

    def invoke(self, computation, arg):
      calls[self.worker] += 1
      return self.context.invoke(computation, arg)

    @property
    def executor_factory(self):  # Values made in the worker (`worker_values`).
      return self.context.executor_factory

  monkeypatch.setattr(tff_runtime, "worker_contexts", lambda: [
      Counted(i, context) for i, context in enumerate(three_workers)])
  holding = worker_values.invoke_holding  # Keys whose bag keys stay in the worker.

  def counted_holding(context, *args):
    calls[context.worker] += 1
    return holding(context, *args)

  monkeypatch.setattr(worker_values, "invoke_holding", counted_holding)
  spread, _ = two_rounds(process, task, config, shards)
  for a, b in zip(one, spread):
    np.testing.assert_array_equal(b, a)
  # A round: 3 calls of 2 clients, one a worker, each its keys then its training.
  assert calls == {0: 2 * 2, 1: 2 * 2, 2: 2 * 2}
  assert any(np.any(a != b) for a, b in zip(one, initial))


@pytest.mark.parametrize("row_mean", ["holders", "clients"])
def test_means_added_to_the_table_in_blocks_are_the_means_to_the_bit(monkeypatch, row_mean):
  """`add_means`, 2 rows at a time, adds to each held row `rate` times its
  mean, the float64 quotient of the row's float32 sum rounded to float32."""
  monkeypatch.setattr(row_sums, "BLOCK_ROWS", 2)
  rng = np.random.default_rng(7)
  keys, real = rng.integers(0, 9, (6, 4)), rng.random((6, 4)) < 0.8
  deltas = rng.normal(size=(6, 4, 3)).astype(np.float32)
  weights = rng.integers(1, 9, 6).astype(np.float32)
  sums = row_sums.RowSums(9, 3, row_mean)
  scaled = row_mean == "clients"
  sums.add(sub_model_answers.client_parts([keys], [deltas], [real], [weights], scaled))
  row_sum, holders = np.zeros((9, 3), np.float32), np.zeros(9)
  for key, delta, weight in zip(keys[real], deltas[real], np.repeat(weights, 4)[real.ravel()]):
    row_sum[key] = row_sum[key] + (delta * weight if scaled else delta)
    holders[key] += 1
  held = np.flatnonzero(holders)
  divisor = weights.sum(dtype=np.float64) if scaled else holders[held][:, None]
  table = rng.normal(size=(9, 3)).astype(np.float32)
  expected = table.copy()
  expected[held] += 0.5 * (row_sum[held] / divisor).astype(np.float32)
  np.testing.assert_array_equal(sums.add_means(table, 0.5), held)
  np.testing.assert_array_equal(table, expected)
  assert len(held) > 4  # Three blocks or more.


def test_a_dense_part_gives_its_keyed_rows_sums_to_the_bit():
  """A call's bag as a dense part (zeros outside its keys) sums to the same
  bits as the same rows added by key, across calls and after `clear`; rows
  outside every part stay zero and are not held."""
  rng = np.random.default_rng(5)
  calls = [(np.array(k), rng.normal(size=(len(k), 3)).astype(np.float32) * 1e-3, w)
           for k, w in (([0, 2, 3], 2.0), ([2, 3, 4], 1.0), ([3], 0.5))]
  calls[1][1][0] = -0.0  # A -0.0 upload added to a sum is the sum.
  by_key, dense = row_sums.RowSums(6, 3, "clients"), row_sums.RowSums(6, 3, "clients")
  for _ in range(2):
    for sums in by_key, dense:
      sums.clear()
    for keys, rows, weight in calls:
      by_key.add(row_sums.RowParts([keys], [rows], [], [weight]))
      whole = np.zeros((6, 3), np.float32)
      whole[keys] = rows
      dense.add(row_sums.RowParts([keys], [whole], [], [weight], dense=True))
    assert dense.mean().tobytes() == by_key.mean().tobytes()
    np.testing.assert_array_equal(np.signbit(dense.mean()), np.signbit(by_key.mean()))
    np.testing.assert_array_equal(dense.mean()[[1, 5]], 0.0)
    np.testing.assert_allclose(
        dense.mean()[3], sum(r[list(k).index(3)] for k, r, _ in calls) / 3.5, rtol=1e-6)
    np.testing.assert_array_equal(dense.add_means(np.zeros((6, 3), np.float32), 1.0),
                                  [0, 2, 3, 4])


@pytest.mark.parametrize("row_mean", ["holders", "clients"])
def test_a_calls_sums_on_every_row_or_on_its_rows_give_the_same_weights(
    tff_context, monkeypatch, row_mean):
  """Sharded FedSS with a selected bag, in calls of up to 2 shards: shards
  that return their class rows' sums and calls that return their bag's on
  every row of the table (`DENSE_SHARE` 0), and ones that return them on
  their own rows (above 1), give the same weights to the bit; the driver adds
  them in one pass or by key, as they come."""
  task, config = settings("k_labels_per_client", 3, row_mean)
  monkeypatch.setattr(sub_model, "MAX_CLIENTS_PER_CALL", 4)
  weights, dense_parts = [], []
  add = row_sums.RowSums.add
  for share in (0.0, 2.0):
    seen = []
    monkeypatch.setattr(row_sums.RowSums, "add",
                        lambda self, parts, seen=seen: (seen.append(parts.dense),
                                                        add(self, parts)))
    monkeypatch.setattr(sub_model_clients, "DENSE_SHARE", share)
    weights.append(two_rounds(build(task, config, "fedss"), task, config, 3)[0])
    dense_parts.append(sum(seen))
  # A round: 3 shards' class rows, 2 calls' bags; two rounds.
  assert dense_parts == [10, 0]
  for dense, keyed in zip(*weights):
    assert dense.tobytes() == keyed.tobytes()


@pytest.mark.parametrize("share,dense", [(0.0, True), (2.0, False)])
def test_a_shards_sums_leave_out_what_is_not_real(monkeypatch, share, dense):
  """`ShardRowSums` of two clients' 3 uploads each on a 10-row table, a shard
  reading rows 1, 4, 7 and 9: each row's real values summed in the clients'
  order (row 9 read, but only by a slot that is not real: zero), on every
  row (`DENSE_SHARE` 0) or on the rows it reads; and how many real slots
  held each."""
  monkeypatch.setattr(sub_model_clients, "DENSE_SHARE", share)
  values = np.arange(12, dtype=np.float32).reshape(6, 2) + 0.5
  ids = np.array([4, 1, 4, 7, 1, 9], np.int32)
  real = np.array([True, True, False, True, True, False])
  call_keys = np.array([1, 4, 7, 9], np.int32)
  places = np.searchsorted(call_keys, ids).astype(np.int32)
  summed = sub_model_clients.ShardRowSums(tf.constant(call_keys), 10)
  sums, holders = summed.zeros([2]), summed.zeros([], tf.int32)
  for client in (slice(0, 3), slice(3, 6)):
    parts = ids[client], places[client], real[client]
    sums = summed.add(sums, values[client], *parts)
    holders = summed.add(holders, np.ones(3, np.int32), *parts)
  sums, holders = sums.numpy(), holders.numpy()
  expected = np.array([values[1] + values[4], values[0], values[3], [0.0, 0.0]])
  if dense:
    np.testing.assert_array_equal(sums[call_keys], expected)
    np.testing.assert_array_equal(np.delete(sums, call_keys, axis=0), 0.0)
    np.testing.assert_array_equal(holders[call_keys], [2, 1, 1, 0])
    assert sums.shape == (10, 2) and holders.sum() == 4
  else:
    np.testing.assert_array_equal(sums, expected)
    np.testing.assert_array_equal(holders, [2, 1, 1, 0])


@pytest.mark.parametrize("share,expected", [(0.0, [0.0, 0.0, 3.0]), (2.0, [0.0, 3.0])])
def test_a_shards_sums_start_from_new_zeros_at_every_call(monkeypatch, share, expected):
  """`ShardRowSums.add` writes into its array: in a graph called three
  times, its rows a constant of the graph (as Grappler may fold), each
  call sums from zeros of its own, none left from the call before; on
  every row of a 3-row table or on the call's keys, rows 0 and 2."""
  monkeypatch.setattr(sub_model_clients, "DENSE_SHARE", share)
  summed = sub_model_clients.ShardRowSums(tf.constant([0, 2], tf.int32), 3)

  @tf.function
  def sums(values):
    return summed.add(summed.zeros([1]), values, tf.constant([2, 2]), tf.constant([1, 1]))

  for _ in range(3):
    np.testing.assert_array_equal(sums(tf.constant([[1.0], [2.0]]))[:, 0], expected)


@pytest.mark.parametrize("table_rows", [4, 10])  # Dense: the call reads every row.
def test_a_row_a_call_read_but_none_of_its_clients_held_is_not_held(table_rows):
  """A call's part whose row 3 had no holder (read only by slots that are
  not real): with `holders`, rows 0-2 take their mean, row 3 is neither held
  nor moved (not 0 / 0), whether the part came dense or on its keys."""
  keys, holders = np.arange(4, dtype=np.int32), np.array([2, 1, 4, 0], np.int32)
  sums = np.array([[2.0], [3.0], [4.0], [0.0]], np.float32)
  summed = row_sums.RowSums(table_rows, 1, "holders")
  part = sub_model_answers.sums_part(keys, sums, [3.0], table_rows, holders)
  assert part.dense == (table_rows == 4)
  summed.add(part)
  table = np.ones((table_rows, 1), np.float32)
  np.testing.assert_array_equal(summed.add_means(table, 1.0), [0, 1, 2])
  np.testing.assert_array_equal(table[:4, 0], [2.0, 4.0, 2.0, 1.0])


@pytest.fixture(scope="module")
def two_table_servers():
  """The addresses of two local table servers (`scripts.table_server`)."""
  with array_service.LocalServers("scripts.table_server", 2,
                                  tff_runtime.prepare_child) as servers:
    yield servers.addresses


@pytest.mark.parametrize("row_mean,workers", [("holders", 1), ("clients", 3)])
def test_a_table_held_by_two_servers_trains_as_the_drivers_to_the_bit(
    tff_context, three_workers, two_table_servers, monkeypatch, row_mean, workers):
  """FedSS, 3 shards of 2 clients, a call each: with the class table in two
  ranges on two servers (each sending its rows to the workers and folding
  the calls' sums of them), two rounds give the weights of the table held
  here, bit for bit, on one worker or three (each server reading every
  worker's calls)."""
  monkeypatch.setattr(sub_model, "MAX_CLIENTS_PER_CALL", 2)
  task, config = settings("k_labels_per_client", 3, row_mean)
  here, initial = two_rounds(build(task, config, "fedss"), task, config, 3)
  if workers == 3:
    monkeypatch.setattr(tff_runtime, "worker_contexts", lambda: three_workers)
  monkeypatch.setattr(served_table, "_addresses", two_table_servers)
  process = build(task, config, "fedss")
  assert process._row_sums is None  # pylint: disable=protected-access
  served, _ = two_rounds(process, task, config, 3)
  for a, b in zip(here, served):
    np.testing.assert_array_equal(b, a)
  assert all(np.any(a != b) for a, b in zip(here, initial))


def test_a_table_step_is_refused_with_table_servers(monkeypatch):
  """FedAwS's spreadout reads the whole table each round: not served."""
  monkeypatch.setattr(served_table, "_addresses", ["localhost:1"])
  task, config = settings("one_label_per_client", 3)
  with pytest.raises(ValueError, match="--table_servers: the class table is served"):
    build(task, config, "fedaws")
