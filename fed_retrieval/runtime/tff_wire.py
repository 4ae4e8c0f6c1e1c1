"""The protocol buffer wire format of TFF's executor service, without TFF.

A process that imports only NumPy and gRPC (a table server, `served_table`:
49 MB resident, against ~640 MB with TensorFlow and TFF; one-off, by /proc)
creates values in a TFF worker and reads the values it computes by writing
and walking the messages' bytes here: a `CreateValueRequest` of an array
held by every client alike (`create_value_request`), a `ComputeRequest`
(`compute_request`), and a computed federated value of structs of arrays
(`federated_structs`). The field numbers are those of TFF 0.87's
`executor.proto` and `array.proto` (tested against them); `value_bytes`
writes and reads TFF's other values with the same helpers.
"""

from typing import Iterator, List, Sequence, Tuple, Union

import numpy as np

Part = Union[bytes, memoryview]
LENGTH_DELIMITED = 2
# Field numbers (executor.proto, array.proto).
CREATE_VALUE_VALUE, CREATE_VALUE_EXECUTOR = 1, 2
CREATE_VALUE_RESPONSE_REF = 1
COMPUTE_REF, COMPUTE_EXECUTOR = 1, 2
COMPUTE_RESPONSE_VALUE = 1
REF_ID = EXECUTOR_ID = 1
VALUE_STRUCT, VALUE_FEDERATED, VALUE_ARRAY = 3, 5, 6
FEDERATED_TYPE, FEDERATED_VALUE = 1, 2
STRUCT_ELEMENT, ELEMENT_VALUE = 1, 2
ARRAY_DTYPE, ARRAY_SHAPE, ARRAY_CONTENT = 1, 2, 18
SHAPE_DIM = 1
# TFF's `DataType` numbers of the dtypes a table server reads and writes.
DTYPES = {1: np.dtype(np.float32), 3: np.dtype(np.int32)}
DTYPE_NUMBERS = {dtype: number for number, dtype in DTYPES.items()}


def varint(number: int) -> bytes:
  out = bytearray()
  while number > 0x7F:
    out.append((number & 0x7F) | 0x80)
    number >>= 7
  out.append(number)
  return bytes(out)


def field(number: int, parts: List[Part]) -> List[Part]:
  """A length-delimited field `number` holding `parts`: its header, then them."""
  size = sum(memoryview(p).nbytes for p in parts)
  return [varint((number << 3) | LENGTH_DELIMITED) + varint(size)] + parts


def read_varint(data: memoryview, at: int) -> Tuple[int, int]:
  """(the varint at `at`, where the next field part starts)."""
  number, shift = 0, 0
  while True:
    byte = data[at]
    number |= (byte & 0x7F) << shift
    at, shift = at + 1, shift + 7
    if byte < 0x80:
      return number, at


def fields(data: memoryview) -> Iterator[Tuple[int, memoryview, memoryview]]:
  """(number, value, the whole field) of each field of a message's wire
  format, as views of `data`: a length-delimited value without its length."""
  at = 0
  while at < len(data):
    start = at
    tag, at = read_varint(data, at)
    wire_type = tag & 7
    if wire_type == 0:
      end = read_varint(data, at)[1]
    elif wire_type == LENGTH_DELIMITED:
      size, at = read_varint(data, at)
      end = at + size
    elif wire_type in (1, 5):  # 64- and 32-bit fixed width.
      end = at + (8 if wire_type == 1 else 4)
    else:
      raise ValueError(f"wire type {wire_type} in a TFF value's bytes")
    yield tag >> 3, data[at:end], data[start:end]
    at = end


def members(data: memoryview, number: int) -> List[memoryview]:
  """The values of every field `number` of a message."""
  return [value for found, value, _ in fields(data) if found == number]


def array_value(array: np.ndarray) -> List[Part]:
  """A `Value` holding `array` as an `Array`'s bytes (float32 or int32)."""
  array = np.ascontiguousarray(array)
  shape = field(SHAPE_DIM, [b"".join(varint(d) for d in array.shape)])  # Packed.
  body = ([varint(ARRAY_DTYPE << 3) + varint(DTYPE_NUMBERS[array.dtype])]
          + field(ARRAY_SHAPE, shape)
          + field(ARRAY_CONTENT, [memoryview(array.reshape(-1).view(np.uint8))]))
  return field(VALUE_ARRAY, body)


def create_value_request(executor_id: str, federated_type: bytes, array: np.ndarray
                         ) -> bytes:
  """A `CreateValueRequest` of `array` as a federated value of
  `federated_type` (a serialized `FederatedType`: all equal at the clients,
  so one member), in the executor `executor_id`."""
  value = field(VALUE_FEDERATED, field(FEDERATED_TYPE, [federated_type])
                + field(FEDERATED_VALUE, array_value(array)))
  return b"".join(field(CREATE_VALUE_VALUE, value) + field(
      CREATE_VALUE_EXECUTOR, field(EXECUTOR_ID, [executor_id.encode()])))


def created_ref(response: bytes) -> str:
  """The value's id in a `CreateValueResponse`."""
  ref, = members(memoryview(response), CREATE_VALUE_RESPONSE_REF)
  ref_id, = members(ref, REF_ID)
  return str(ref_id, "utf-8")


def compute_request(executor_id: str, ref_id: str) -> bytes:
  """A `ComputeRequest` of the value `ref_id` in the executor `executor_id`."""
  return b"".join(field(COMPUTE_REF, field(REF_ID, [ref_id.encode()])) + field(
      COMPUTE_EXECUTOR, field(EXECUTOR_ID, [executor_id.encode()])))


def _dims(shape: memoryview) -> List[int]:
  """An `ArrayShape`'s dims, packed or not."""
  dims = []
  for number, part, whole in fields(shape):
    if number != SHAPE_DIM:
      continue
    if whole[0] & 7 != LENGTH_DELIMITED:  # One dim, a varint.
      dims.append(read_varint(part, 0)[0])
      continue
    at = 0
    while at < len(part):
      dim, at = read_varint(part, at)
      dims.append(dim)
  return dims


def array_of(value: memoryview) -> np.ndarray:
  """The array a `Value` holds as an `Array`'s bytes, a view of `value`."""
  (which, body, _), = fields(value)
  if which != VALUE_ARRAY:
    raise ValueError(f"a value of kind {which}, not an array")
  dtype, shape, content = None, (), None
  for number, part, _ in fields(body):
    if number == ARRAY_DTYPE:
      dtype = DTYPES[read_varint(part, 0)[0]]
    elif number == ARRAY_SHAPE:
      shape = _dims(part)
    elif number == ARRAY_CONTENT:
      content = part
  if dtype is None or (content is None and np.prod(shape) > 0):
    raise ValueError("an array not held as its bytes")
  return np.frombuffer(content if content is not None else b"", dtype).reshape(shape)


def federated_structs(response: bytes) -> List[Sequence[np.ndarray]]:
  """The members of the federated value in a `ComputeResponse`, each a struct
  of arrays: [the arrays of each member]."""
  value, = members(memoryview(response), COMPUTE_RESPONSE_VALUE)
  (which, body, _), = fields(value)
  if which != VALUE_FEDERATED:
    raise ValueError(f"a value of kind {which}, not a federated one")
  result = []
  for member in members(body, FEDERATED_VALUE):
    (kind, struct, _), = fields(member)
    if kind != VALUE_STRUCT:
      raise ValueError(f"a member of kind {kind}, not a struct")
    result.append([array_of(members(element, ELEMENT_VALUE)[0])
                   for element in members(struct, STRUCT_ELEMENT)])
  return result
