"""A value's request written by `value_bytes` parses to the one TFF writes,
and a worker computes on values sent that way."""

import collections
from unittest import mock

import grpc
import numpy as np
import portpicker
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import array_pb2
from tensorflow_federated.proto.v0 import executor_pb2
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.executors import value_serialization

from fed_retrieval.runtime import value_bytes
from fed_retrieval.runtime import wire_bytes
from fed_retrieval.runtime import worker_values

EXECUTOR = executor_pb2.ExecutorId(id="executor1")
ROWS = tff.TensorType(np.float32, [None, 3])


def _tff_request(value, type_spec):
  proto, _ = value_serialization.serialize_value(value, type_spec)
  return executor_pb2.CreateValueRequest(executor=EXECUTOR, value=proto)


def _graphs_read(request):
  """The request with each client's dataset graph replaced by nothing, and
  the elements those graphs give (TFF's graph of a dataset differs between
  two of its own serializations; what it reads does not)."""
  elements = []
  for member in request.value.federated.value:
    if member.HasField("sequence"):
      dataset, _ = value_serialization.deserialize_value(member)
      elements.append([np.asarray(t) for e in dataset for t in tf.nest.flatten(e)])
      member.sequence.ClearField("serialized_graph_def")
  return request, elements


def _dataset(start):
  return tf.data.Dataset.from_tensor_slices(
      (np.arange(start, start + 6, dtype=np.int32).reshape(3, 2),
       np.arange(3, dtype=np.float32))).batch(2)


CASES = {
    "server rows": (np.arange(15, dtype=np.float32).reshape(5, 3),
                    tff.FederatedType(ROWS, tff.SERVER)),
    "cast to the type's dtype": (np.arange(4, dtype=np.int32),
                                 tff.TensorType(np.int64, [4])),
    "booleans": (np.array([[True, False]]), tff.TensorType(np.bool_, [1, 2])),
    "no rows": (np.zeros((0, 3), np.float32), ROWS),
    "a member per client": ([np.ones((2, 3), np.float32), np.zeros((0, 3), np.float32)],
                            tff.FederatedType(ROWS, tff.CLIENTS)),
    "scalar (TFF's own bytes)": (np.float32(2.5), tff.TensorType(np.float32)),
    "named struct with a scalar": (
        collections.OrderedDict(rows=np.ones((1, 3), np.float32), step=np.int64(7)),
        tff.StructType([("rows", ROWS), ("step", tff.TensorType(np.int64))])),
    "unnamed struct of federated values": (
        (np.ones((2, 3), np.float32), [np.arange(2, dtype=np.int32)] * 2),
        tff.StructType([tff.FederatedType(ROWS, tff.SERVER),
                        tff.FederatedType(tff.TensorType(np.int32, [None]), tff.CLIENTS)])),
    "datasets of clients": (
        [_dataset(0), _dataset(10)],
        tff.FederatedType(tff.SequenceType((tff.TensorType(np.int32, [None, 2]),
                                            tff.TensorType(np.float32, [None]))),
                          tff.CLIENTS)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_request_parses_to_the_one_tff_writes(case):
  value, type_spec = CASES[case]
  written, elements = _graphs_read(executor_pb2.CreateValueRequest.FromString(
      value_bytes.create_value_request(EXECUTOR, value, type_spec)))
  expected, expected_elements = _graphs_read(_tff_request(value, type_spec))
  assert written == expected
  assert len(elements) == len(expected_elements) == (2 if "datasets" in case else 0)
  for got, want in zip(elements, expected_elements):
    assert len(got) == len(want)
    for g, w in zip(got, want):
      np.testing.assert_array_equal(g, w)


def test_the_request_holds_an_array_as_its_bytes():
  """The data goes into the request as it is, with headers of a few dozen
  bytes around it."""
  rows = np.random.default_rng(0).random((1000, 3), dtype=np.float32)
  written = value_bytes.create_value_request(EXECUTOR, rows, ROWS)
  assert rows.tobytes() in written and len(written) - rows.nbytes < 64


def test_a_value_the_type_does_not_take_fails_as_in_tff():
  with pytest.raises(TypeError, match="dtype"):
    value_bytes.create_value_request(EXECUTOR, np.ones((2, 3)), ROWS)  # float64.
  with pytest.raises(TypeError, match="shape"):
    value_bytes.create_value_request(EXECUTOR, np.ones((2, 4), np.float32), ROWS)


def _assert_same(got, want):
  """`got` is `want`'s kind of value, with its names, dtypes and values."""
  assert type(got) is type(want)
  if isinstance(want, structure.Struct):
    got, want = structure.iter_elements(got), structure.iter_elements(want)
    assert [n for n, _ in got] == [n for n, _ in want]
    got, want = [v for _, v in got], [v for _, v in want]
  if isinstance(want, (list, structure.Struct)) or isinstance(got, list):
    assert len(got) == len(want)
    for g, w in zip(got, want):
      _assert_same(g, w)
  else:
    assert np.asarray(got).dtype == np.asarray(want).dtype
    np.testing.assert_array_equal(got, want)


def _computed(value, type_spec) -> bytes:
  proto, _ = value_serialization.serialize_value(value, type_spec)
  return executor_pb2.ComputeResponse(value=proto).SerializeToString()


@pytest.mark.parametrize("case", sorted(c for c in CASES if "datasets" not in c))
def test_a_computed_value_reads_as_tff_reads_it(case):
  value, type_spec = CASES[case]
  response = _computed(value, type_spec)
  want, _ = value_serialization.deserialize_value(
      executor_pb2.ComputeResponse.FromString(response).value, type_spec)
  _assert_same(value_bytes.computed_value(response, type_spec), want)


def test_a_calls_headers_make_no_message_once_their_shapes_were_sent(monkeypatch):
  """A call like an earlier one, new data in the same dtypes, shapes and
  names, is written and read without a protocol buffer message: each freed
  one counts towards protobuf's `malloc_trim` (module docstring)."""
  type_spec = tff.StructType([("rows", ROWS), ("ids", tff.TensorType(np.int64, [None]))])
  value = collections.OrderedDict(rows=np.ones((1, 3), np.float32), ids=np.arange(2))
  request = value_bytes.create_value_request(EXECUTOR, value, type_spec)
  value_bytes.computed_value(_computed(value, type_spec), type_spec)
  again = collections.OrderedDict(rows=np.full((1, 3), 2.0, np.float32), ids=np.arange(3, 5))
  response = _computed(again, type_spec)
  made = collections.Counter()
  for message in (array_pb2.Array, array_pb2.ArrayShape, executor_pb2.Value.Struct.Element):
    def counted(self, *args, _init=message.__init__, _name=message.__name__, **kwargs):
      made[_name] += 1
      _init(self, *args, **kwargs)
    monkeypatch.setattr(message, "__init__", counted)
  written = value_bytes.create_value_request(EXECUTOR, again, type_spec)
  read = value_bytes.computed_value(response, type_spec)
  assert not made
  assert len(written) == len(request) and written != request
  np.testing.assert_array_equal(read.rows, again["rows"])
  np.testing.assert_array_equal(read.ids, again["ids"])


def test_a_large_computed_array_is_a_view_of_its_response_and_a_small_one_a_copy():
  large = np.random.default_rng(0).random((value_bytes.VIEW_BYTES // 12 + 1, 3),
                                          dtype=np.float32)
  small = large[:10]
  type_spec = tff.StructType([ROWS, ROWS])
  response = _computed((large, small), type_spec)
  got_large, got_small = value_bytes.computed_value(response, type_spec)
  np.testing.assert_array_equal(got_large, large)
  np.testing.assert_array_equal(got_small, small)
  whole = np.frombuffer(response, np.uint8)
  assert np.shares_memory(got_large, whole) and not got_large.flags.writeable
  assert not np.shares_memory(got_small, whole)


ROWS_AT_SERVER = tff.FederatedType(ROWS, tff.SERVER)
PICKS = tff.FederatedType(tff.TensorType(np.int32, [None]), tff.CLIENTS)


@tff.tensorflow.computation(ROWS, PICKS.member)
def _picked_sum(rows, picks):
  return tf.reduce_sum(tf.gather(rows, picks), axis=0)


@tff.federated_computation(ROWS_AT_SERVER, PICKS)
def _picked(rows, picks):
  return tff.federated_map(_picked_sum, (tff.federated_broadcast(rows), picks))


def test_the_worker_computes_on_values_sent_as_bytes(tff_context, monkeypatch):
  sent, received = [], []
  create_value_bytes = value_bytes.BytesStub.create_value_bytes
  compute_bytes = value_bytes.BytesStub.compute_bytes

  def counted(self, request):
    sent.append(len(request))
    return create_value_bytes(self, request)

  def counted_back(self, request):
    received.append(compute_bytes(self, request))
    return received[-1]

  monkeypatch.setattr(value_bytes.BytesStub, "create_value_bytes", counted)
  monkeypatch.setattr(value_bytes.BytesStub, "compute_bytes", counted_back)
  rows = np.arange(15, dtype=np.float32).reshape(5, 3)
  picks = [np.array([0, 4], np.int32), np.array([2, 2, 1], np.int32)]
  held = worker_values.created(None, rows, ROWS_AT_SERVER, clients=2)
  result = worker_values.invoke(None, _picked, held, picks)
  np.testing.assert_array_equal(np.stack(result), [rows[p].sum(axis=0) for p in picks])
  assert sent and sent[0] >= rows.nbytes  # The rows went as bytes.
  assert len(received) == 1  # And the sums came back as bytes.


@tff.tensorflow.computation(ROWS)
def _doubled(rows):
  return rows * 2.0


@tff.federated_computation(tff.FederatedType(ROWS, tff.CLIENTS))
def _doubled_at_clients(rows):
  return tff.federated_map(_doubled, rows)


def test_a_workers_calls_are_counted_at_their_bytes_each_way(tff_context):
  """1.2 MB of rows sent and their double back: each way that and the calls'
  small messages (their ids, the computation once), by the worker's address."""
  rows = np.ones((100_000, 3), np.float32)
  before = wire_bytes.totals()
  held = worker_values.created(None, [rows], _doubled_at_clients.type_signature.parameter,
                               clients=1)
  (doubled,) = worker_values.invoke(None, _doubled_at_clients, held)
  np.testing.assert_array_equal(doubled, 2 * rows)
  sent, received = wire_bytes.between(before, wire_bytes.totals(), tff_context.address)
  assert rows.nbytes < sent < rows.nbytes + 10_000
  assert rows.nbytes < received < rows.nbytes + 1_000


def test_the_stub_never_subscribes_to_its_channels_state():
  """A subscribed channel is polled by a gRPC thread for its life."""
  channel = mock.MagicMock(spec=grpc.Channel)
  value_bytes.BytesStub(channel)
  assert channel.unary_unary.called and not channel.subscribe.called


def test_a_stub_whose_port_nobody_serves_is_not_ready():
  """`is_ready` waits a moment (`READY_WAIT_SECONDS`), then answers no."""
  channel = grpc.insecure_channel(f"localhost:{portpicker.pick_unused_port()}")
  assert not value_bytes.BytesStub(channel).is_ready
  channel.close()
