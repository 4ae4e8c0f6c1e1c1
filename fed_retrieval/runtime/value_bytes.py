"""A value sent to a TFF worker as the bytes of its request, each array's data
copied once, and a computed value read from the bytes of its response, a
large array's data not copied at all.

TFF's `RemoteExecutor.create_value` builds the request as nested protocol
buffer messages, and each level copies what it holds: an array's bytes, the
`Array` message, the `Value` around it, the federated value's list, the
request, its serialized string, gRPC's buffer. A 35 MB bag of a sub-model
round took 0.30 CPU s to send that way and 0.05 s as below (one-off, one
local worker). Here the request's wire format is written directly: every
field a header (its number and length) and its parts, an array's data and a
dataset's graph as they are, joined into the request once. The bytes parse
to the message TFF would have sent (tested); anything that is not an array,
a dataset, or a federated value or struct of them (scalars, strings,
computations, Python lists) is TFF's own serialization of it, as one part.

The way back is alike: TFF parses a `Compute` response into messages (a copy
of an array's bytes), then takes each array's `content` out of its message (a
second copy), after gRPC's own. `value_from_bytes` walks the response's wire
format instead and reads an array of at least `VIEW_BYTES` as a NumPy view of
the response's bytes (read-only, as TFF's are); a smaller one is copied, so
keeping it does not keep a whole response alive. Anything but arrays, structs
and federated values is parsed by TFF, as are scalars and strings. A
[130000, 64] float32 value sent to one local worker and computed back took
the driver 21.6-24.4 CPU ms instead of 26.6-27.1 (20 calls each way, two
runs, alternated; one-off); a 4,000-client round's driver did not move
beyond its sittings' spread.

The headers around the data, an array's dtype and shape and a struct
element's name, are alike across a run's calls, so each is serialized, or
read, once (`HEADERS`, the most recent kept): every protocol buffer message
freed counts towards protobuf's periodic `malloc_trim`, which hands the
driver's kept heap back (`malloc_tuning`). At Amazon-670K's shape (4,000
clients, one worker) the headers were 586 of the driver's 790 messages a
round.

`BytesStub` is TFF's gRPC stub with a `create_value_bytes` that sends such a
request and a `compute_bytes` that returns the response's bytes;
`computation_cache`'s executor uses them when its stub is one.
"""

import functools
from typing import Any, List, Optional, Tuple

import grpc
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import array_pb2
from tensorflow_federated.proto.v0 import executor_pb2
from tensorflow_federated.proto.v0 import executor_pb2_grpc
from tensorflow_federated.python.common_libs import structure
from tensorflow_federated.python.core.impl.compiler import array
from tensorflow_federated.python.core.impl.executors import remote_executor_grpc_stub
from tensorflow_federated.python.core.impl.executors import value_serialization
from tensorflow_federated.python.core.impl.types import array_shape
from tensorflow_federated.python.core.impl.types import dtype_utils
from tensorflow_federated.python.core.impl.types import type_serialization

from fed_retrieval.runtime import tff_wire
from fed_retrieval.runtime import wire_bytes

Part = tff_wire.Part
READY_WAIT_SECONDS = 0.1
# A computed array of at least this many bytes is read as a view of its
# response; a smaller one is copied out of it.
VIEW_BYTES = 1 << 20
# Headers kept serialized, and read, of each kind (module docstring).
HEADERS = 4096


def _number(message, name: str) -> int:
  """The field number of `name` in `message` (a message class)."""
  return message.DESCRIPTOR.fields_by_name[name].number


def _field(message, name: str, parts: List[Part]) -> List[Part]:
  """A length-delimited field `name` of `message` (a message class) holding
  `parts`: its header, then the parts."""
  return tff_wire.field(_number(message, name), parts)


@functools.lru_cache(maxsize=HEADERS)
def _array_header(dtype: np.dtype, shape: Tuple[int, ...]) -> bytes:
  """An `Array` message's dtype and shape, serialized."""
  return array_pb2.Array(dtype=dtype_utils.to_proto(dtype.type),
                         shape=array_shape.to_proto(shape)).SerializeToString()


@functools.lru_cache(maxsize=HEADERS)
def _element_name(name: str) -> bytes:
  """A struct `Element` message's name, serialized."""
  return executor_pb2.Value.Struct.Element(name=name).SerializeToString()


@functools.lru_cache(maxsize=HEADERS)
def _dtype_and_shape(header: bytes) -> Tuple[type, Optional[Tuple[int, ...]]]:
  """The dtype and shape of a serialized `Array` message without its data."""
  message = array_pb2.Array.FromString(header)
  return dtype_utils.from_proto(message.dtype), array_shape.from_proto(message.shape)


def _array_parts(value: np.ndarray, type_spec: tff.TensorType) -> List[Part]:
  """An `Array` message: dtype and shape, then the data (`content`)."""
  value = np.ascontiguousarray(np.asarray(value, type_spec.dtype.type))
  return [_array_header(value.dtype, value.shape)] + _field(
      array_pb2.Array, "content", [memoryview(value.reshape(-1).view(np.uint8))])


def _is_content_array(value: Any, type_spec: tff.TensorType) -> bool:
  """Whether TFF would send `value` as an array's bytes (`content`): a NumPy
  array of a shape and dtype the type takes, not a scalar or string."""
  return (isinstance(value, np.ndarray) and type_spec.dtype.type is not np.str_
          and not array_shape.is_shape_scalar(type_spec.shape)
          and array.is_compatible_dtype(value, type_spec.dtype.type)
          and array.is_compatible_shape(value, type_spec.shape))


def value_parts(value: Any, type_spec: tff.types.Type) -> List[Part]:
  """The serialized `executor_pb2.Value` of `value` (of `type_spec`), as
  parts to join."""
  if isinstance(type_spec, tff.TensorType) and _is_content_array(value, type_spec):
    return _field(executor_pb2.Value, "array", _array_parts(value, type_spec))
  if isinstance(type_spec, tff.FederatedType):
    members = [value] if type_spec.all_equal else value
    if isinstance(members, list):
      federated_type = type_serialization.serialize_type(type_spec).federated
      parts = _field(executor_pb2.Value.Federated, "type",
                     [federated_type.SerializeToString()])
      for member in members:
        parts += _field(executor_pb2.Value.Federated, "value",
                        value_parts(member, type_spec.member))
      return _field(executor_pb2.Value, "federated", parts)
  if isinstance(type_spec, tff.StructType) and not isinstance(value, (str, bytes)):
    elements = structure.from_container(value)
    if len(elements) == len(type_spec):
      parts = []
      for (name, element_type), (_, element) in zip(
          structure.iter_elements(type_spec), structure.iter_elements(elements)):
        parts += _field(executor_pb2.Value.Struct, "element", [_element_name(name or "")]
                        + _field(executor_pb2.Value.Struct.Element, "value",
                                 value_parts(element, element_type)))
      return _field(executor_pb2.Value, "struct", parts)
  if isinstance(type_spec, tff.SequenceType) and isinstance(value, tf.data.Dataset):
    element_type = tff.types.tensorflow_to_type(value.element_spec)
    if type_spec.is_assignable_from(tff.SequenceType(element_type)):
      value_serialization._check_container_compat_with_tf_nest(element_type)  # pylint: disable=protected-access
      graph = value_serialization._serialize_dataset(value)  # pylint: disable=protected-access
      sequence = _field(executor_pb2.Value.Sequence, "serialized_graph_def", [graph]) + (
          _field(executor_pb2.Value.Sequence, "element_type",
                 [type_serialization.serialize_type(element_type).SerializeToString()]))
      return _field(executor_pb2.Value, "sequence", sequence)
  # TFF's own serialization: small values, and its type errors.
  return [value_serialization.serialize_value(value, type_spec)[0].SerializeToString()]


def create_value_request(executor: executor_pb2.ExecutorId, value: Any,
                         type_spec: tff.types.Type) -> bytes:
  """The serialized `CreateValueRequest` of `value` in `executor`."""
  return b"".join(
      _field(executor_pb2.CreateValueRequest, "executor", [executor.SerializeToString()])
      + _field(executor_pb2.CreateValueRequest, "value", value_parts(value, type_spec)))


def _content_array(data: memoryview, type_spec: tff.TensorType):
  """The value of an `Array` message held as its bytes (`content`), None if
  TFF reads it otherwise (a scalar, strings)."""
  if type_spec.dtype.type is np.str_ or array_shape.is_shape_scalar(type_spec.shape):
    return None
  header, content = [], None
  for number, value, whole in tff_wire.fields(data):
    if number == _number(array_pb2.Array, "content"):
      content = value
    else:
      header.append(whole)
  dtype, shape = _dtype_and_shape(b"".join(header))
  if content is None or array_shape.is_shape_scalar(shape):
    return None
  value = np.frombuffer(content, dtype)
  return (value if value.nbytes >= VIEW_BYTES else value.copy()).reshape(shape)


def value_from_bytes(data: memoryview, type_spec: tff.types.Type) -> Any:
  """The value of a serialized `executor_pb2.Value` of `type_spec`, as TFF's
  `deserialize_value` gives it, a large array a view of `data` (module
  docstring)."""
  (which, body, _), = tff_wire.fields(data)  # A `Value` is one of its kinds.
  if isinstance(type_spec, tff.TensorType) and which == _number(executor_pb2.Value, "array"):
    value = _content_array(body, type_spec)
    if value is not None:
      return value
  elif isinstance(type_spec, tff.StructType) and which == _number(executor_pb2.Value,
                                                                   "struct"):
    element = executor_pb2.Value.Struct.Element
    elements = tff_wire.members(body, _number(executor_pb2.Value.Struct, "element"))
    if len(elements) == len(type_spec):
      named = []
      for element_bytes, element_type in zip(elements, type_spec):
        fields = {number: value for number, value, _ in tff_wire.fields(element_bytes)}
        name = str(fields.get(_number(element, "name"), b""), "utf-8") or None
        named.append((name, value_from_bytes(fields[_number(element, "value")],
                                             element_type)))
      return structure.Struct(named)
  elif isinstance(type_spec, tff.FederatedType) and which == _number(executor_pb2.Value,
                                                                     "federated"):
    members = tff_wire.members(body, _number(executor_pb2.Value.Federated, "value"))
    if members:  # TFF's error otherwise.
      if type_spec.all_equal:  # TFF reads the first alone.
        return value_from_bytes(members[0], type_spec.member)
      return [value_from_bytes(m, type_spec.member) for m in members]
  return value_serialization.deserialize_value(
      executor_pb2.Value.FromString(bytes(data)), type_spec)[0]


def computed_value(response: bytes, type_spec: tff.types.Type) -> Any:
  """The value of a serialized `executor_pb2.ComputeResponse` (`value_from_bytes`)."""
  value, = tff_wire.members(memoryview(response),
                            _number(executor_pb2.ComputeResponse, "value"))
  return value_from_bytes(value, type_spec)


def _size(message: Any) -> int:
  """A message's serialized size: its length if already bytes."""
  if isinstance(message, (bytes, bytearray, memoryview)):
    return memoryview(message).nbytes
  return message.ByteSize()


class _Counted(grpc.UnaryUnaryClientInterceptor):
  """Counts each call's request and response as the bytes of the peer at
  `address` (`wire_bytes`; the executor service's calls are all unary)."""

  def __init__(self, address: str):
    self._address = address

  def intercept_unary_unary(self, continuation, client_call_details, request):
    outcome = continuation(client_call_details, request)

    def count(done) -> None:
      wire_bytes.add(self._address, _size(request),
                     _size(done.result()) if done.exception() is None else 0)

    outcome.add_done_callback(count)
    return outcome


class BytesStub(tff.framework.RemoteExecutorGrpcStub):
  """TFF's stub of a worker's executor service over `channel`, which also
  sends a `CreateValue` request already serialized (`create_value_bytes`)
  and gives a `Compute` response as its bytes (`compute_bytes`).

  TFF's stub subscribes to the channel's state for the channel's life, and
  gRPC polls a subscribed channel in a thread of its own five times a second:
  0.1-0.15 CPU s of a 14 s round on three local workers (4,000 clients at
  Amazon-670K's shape; one-off, by thread clocks). This stub asks whether the
  channel is ready when it is asked (`is_ready`) and does not subscribe.
  Given the worker's `address`, its calls' bytes are counted (`wire_bytes`)."""

  def __init__(self, channel: grpc.Channel,  # pylint: disable=super-init-not-called
               address: Optional[str] = None):
    self._channel, self.address = channel, address
    calls = channel if address is None else grpc.intercept_channel(channel, _Counted(address))
    self._stub = executor_pb2_grpc.ExecutorGroupStub(calls)
    service = executor_pb2.DESCRIPTOR.services_by_name["ExecutorGroup"].full_name
    self._create_value_bytes = calls.unary_unary(
        f"/{service}/CreateValue",
        request_serializer=None,
        response_deserializer=executor_pb2.CreateValueResponse.FromString)
    self._compute_bytes = calls.unary_unary(
        f"/{service}/Compute",
        request_serializer=executor_pb2.ComputeRequest.SerializeToString,
        response_deserializer=None)

  @property
  def is_ready(self) -> bool:
    """Whether the channel is ready, or becomes so within `READY_WAIT_SECONDS`
    (it is asked to connect)."""
    ready = grpc.channel_ready_future(self._channel)
    try:
      ready.result(timeout=READY_WAIT_SECONDS)
      return True
    except grpc.FutureTimeoutError:
      ready.cancel()  # Its subscription ends with it.
      return False

  def create_value_bytes(self, request: bytes) -> executor_pb2.CreateValueResponse:
    """`create_value` of a serialized request, its errors as TFF raises them."""
    return remote_executor_grpc_stub._request(self._create_value_bytes, request)  # pylint: disable=protected-access

  def compute_bytes(self, request: executor_pb2.ComputeRequest) -> bytes:
    """The serialized `ComputeResponse` of `request`, its errors as TFF raises them."""
    return remote_executor_grpc_stub._request(self._compute_bytes, request)  # pylint: disable=protected-access
