"""Each computation is created in the TFF worker once per executor id."""

import asyncio

import numpy as np
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import executor_pb2

from fed_retrieval.runtime import computation_cache


class _CountingStub:
  """A stand-in for the worker's gRPC stub: hands out executor ids and value
  references, and counts the values it was asked to create."""

  def __init__(self):
    self.created, self.executors = 0, 0

  def get_executor(self, request):
    self.executors += 1
    return executor_pb2.GetExecutorResponse(
        executor=executor_pb2.ExecutorId(id=f"executor{self.executors}"))

  def create_value(self, request):
    self.created += 1
    return executor_pb2.CreateValueResponse(
        value_ref=executor_pb2.ValueRef(id=f"value{self.created}"))

  def dispose(self, request):
    pass

  def dispose_executor(self, request):
    pass


@tff.tensorflow.computation(np.int32)
def _add_one(x):
  return x + 1


@tff.tensorflow.computation(np.int32)
def _double(x):
  return 2 * x


@tff.tensorflow.computation(np.int32)
def _triple(x):
  return 3 * x


def _create(executor, value, type_spec=None):
  return asyncio.run(executor.create_value(
      value, type_spec or getattr(value, "type_signature", None)))


def test_a_computation_is_sent_once_per_executor_id_and_other_values_every_time():
  stub = _CountingStub()
  executor = computation_cache.ComputationCachingRemoteExecutor(stub)
  executor.set_cardinalities({tff.CLIENTS: 2})
  first = _create(executor, _add_one)
  assert _create(executor, _add_one) is first and stub.created == 1
  assert _create(executor, _double) is not first and stub.created == 2
  _create(executor, np.int32(3), tff.TensorType(np.int32))
  _create(executor, np.int32(3), tff.TensorType(np.int32))
  assert stub.created == 4  # Plain values are not cached.
  # A new executor id in the worker (other cardinalities, or after `close`):
  # its values are new, so the computation is created again.
  executor.set_cardinalities({tff.CLIENTS: 3})
  assert _create(executor, _add_one) is not first and stub.created == 5
  executor.close()
  executor.set_cardinalities({tff.CLIENTS: 3})
  _create(executor, _add_one)
  assert stub.created == 6


def test_only_the_most_recently_run_computations_are_kept():
  stub = _CountingStub()
  executor = computation_cache.ComputationCachingRemoteExecutor(stub)
  executor.max_computations = 2
  executor.set_cardinalities({tff.CLIENTS: 1})
  add_one = _create(executor, _add_one)
  _create(executor, _double)
  assert _create(executor, _add_one) is add_one  # Now the most recent.
  _create(executor, _triple)  # Drops `_double`, the least recently run.
  assert stub.created == 3
  assert _create(executor, _add_one) is add_one and stub.created == 3
  _create(executor, _double)
  assert stub.created == 4


def test_rounds_reuse_the_computation_in_the_worker_with_the_same_results(
    tff_context, monkeypatch):
  del tff_context  # The session's worker runs the calls.
  sent = []
  base_create_value = tff.framework.RemoteExecutor.create_value

  async def counting_create_value(self, value, type_spec=None):
    if isinstance(value, tff.framework.ConcreteComputation):
      sent.append(value)
    return await base_create_value(self, value, type_spec)

  monkeypatch.setattr(tff.framework.RemoteExecutor, "create_value", counting_create_value)

  @tff.federated_computation(tff.FederatedType(np.int32, tff.CLIENTS))
  def add_one_at_clients(values):
    return tff.federated_map(_add_one, values)

  results = [add_one_at_clients([k, 10 * k]) for k in range(4)]
  assert [list(r) for r in results] == [[k + 1, 10 * k + 1] for k in range(4)]
  assert len(sent) == 1  # Four calls, one computation created in the worker.
  assert list(add_one_at_clients([1, 2, 3])) == [2, 3, 4]  # Three clients: a new executor.
  assert len(sent) == 2
  assert list(add_one_at_clients([5, 6])) == [6, 7]
  assert len(sent) == 2
