"""A value created in a TFF worker once (on the server, or one member per
client) is read by several calls there as the value itself would be, and is
not sent again."""

import threading
import types

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.runtime import computation_cache
from fed_retrieval.runtime import worker_values

ROWS = tff.FederatedType(tff.TensorType(np.float32, [None, 2]), tff.SERVER)
PICKS = tff.FederatedType(tff.TensorType(np.int32, [None]), tff.CLIENTS)


@tff.tensorflow.computation(ROWS.member, PICKS.member)
def _picked_sum(rows, picks):
  return tf.reduce_sum(tf.gather(rows, picks), axis=0)


@tff.federated_computation(ROWS, PICKS)
def picked(rows, picks):
  """Each client's sum of the rows it picks."""
  return tff.federated_map(_picked_sum, (tff.federated_broadcast(rows), picks))


def test_a_value_made_in_the_worker_serves_several_calls_sent_once(
    tff_context, monkeypatch):
  rows = np.arange(12, dtype=np.float32).reshape(6, 2)
  sent = []
  create_value = computation_cache.ComputationCachingRemoteExecutor.create_value

  async def counted(self, value, type_spec=None):
    if isinstance(value, np.ndarray) and value.shape == rows.shape:
      sent.append(value)
    return await create_value(self, value, type_spec)

  monkeypatch.setattr(computation_cache.ComputationCachingRemoteExecutor,
                      "create_value", counted)
  held = worker_values.created(None, rows, ROWS, clients=2)
  assert not isinstance(held, np.ndarray) and len(sent) == 1
  for picks in ([[0, 5], [1, 1, 2]], [[3], [4]]):
    picks = [np.array(p, np.int32) for p in picks]
    expected = [rows[p].sum(axis=0) for p in picks]
    for result in (worker_values.invoke(None, picked, held, picks),
                   worker_values.invoke(None, picked, rows, picks)):
      np.testing.assert_array_equal(np.stack(result), expected)
  assert len(sent) == 3  # Once made, then the array passed itself, twice.


def test_a_value_of_the_clients_made_in_the_worker_gives_the_call_its_clients(
    tff_context):
  """A call whose only clients' argument lives in the worker learns their
  number from it (TFF's context counts a call's clients from its arguments);
  the same value serves two calls."""
  rows = np.arange(12, dtype=np.float32).reshape(6, 2)
  picks = [np.array(p, np.int32) for p in ([0, 5], [1, 1, 2], [4])]
  held = worker_values.created(None, picks, PICKS, clients=3)
  for _ in range(2):
    result = worker_values.invoke(None, picked, rows, held)
    np.testing.assert_array_equal(np.stack(result), [rows[p].sum(axis=0) for p in picks])


def test_a_context_with_a_turn_makes_its_values_in_turn():
  """As `OneCallAtATime`'s calls, a value is made while the context's turn
  is held, so no other worker's work runs beside it."""
  turn, held = threading.Lock(), []

  class Executor:
    async def create_value(self, value, type_spec):
      del type_spec
      held.append(turn.locked())
      return value

  class Factory:
    def create_executor(self, cardinalities):
      del cardinalities
      return Executor()

  in_turn = types.SimpleNamespace(executor_factory=Factory(), turn=turn)
  rows = np.ones((2, 2), np.float32)
  assert worker_values.created(in_turn, rows, ROWS, clients=1) is rows
  assert held == [True] and not turn.locked()


def test_a_context_that_cannot_hold_values_gets_the_value_itself():
  rows = np.ones((2, 2), np.float32)
  assert worker_values.created(object(), rows, ROWS, clients=1) is rows


@tff.tensorflow.computation(PICKS.member)
def _counted_and_doubled(picks):
  return tf.size(picks), picks * 2


@tff.federated_computation(PICKS)
def counted_and_doubled(picks):
  """Each client's count of its picks, and its picks doubled."""
  both = tff.federated_map(_counted_and_doubled, picks)
  return both[0], both[1]


def test_a_calls_second_result_stays_in_the_worker_for_a_later_call(tff_context):
  """`invoke_holding`: the first result comes back, the second is held where
  it was computed and read by the next call as the value itself would be."""
  rows = np.arange(20, dtype=np.float32).reshape(10, 2)
  picks = [np.array(p, np.int32) for p in ([0, 4], [1, 1, 2], [3])]
  counts, doubled = worker_values.invoke_holding(None, counted_and_doubled, 3, picks)
  assert list(counts) == [2, 3, 1] and not isinstance(doubled, list)
  result = worker_values.invoke(None, picked, rows, doubled)
  np.testing.assert_array_equal(np.stack(result), [rows[2 * p].sum(axis=0) for p in picks])


def test_a_context_that_cannot_hold_values_gets_both_results(tff_context):
  """A context with no executor factory (a test's stand-in, TFF's mergeable
  context) runs the call as `invoke` does; both parts come back."""
  picks = [np.array([1, 2], np.int32), np.array([5], np.int32)]

  class NoFactory:  # Runs the computation in TFF's context, holds nothing.
    def invoke(self, computation, arg):
      return tff.framework.get_context_stack().current.invoke(computation, arg)

  counts, doubled = worker_values.invoke_holding(NoFactory(), counted_and_doubled, 2, picks)
  assert list(counts) == [2, 1]
  np.testing.assert_array_equal(doubled[0], [2, 4])
  np.testing.assert_array_equal(doubled[1], [10])
