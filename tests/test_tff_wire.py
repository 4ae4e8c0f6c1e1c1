"""TFF's executor messages written and read without TFF (`tff_wire`): the
bytes parse as TFF's messages, and TFF's messages read back as they were."""

import numpy as np
import tensorflow_federated as tff
from tensorflow_federated.proto.v0 import array_pb2
from tensorflow_federated.proto.v0 import data_type_pb2
from tensorflow_federated.proto.v0 import executor_pb2
from tensorflow_federated.python.core.impl.executors import value_serialization
from tensorflow_federated.python.core.impl.types import type_serialization

from fed_retrieval.runtime import tff_wire


def _number(message, name):
  return message.DESCRIPTOR.fields_by_name[name].number


def test_the_field_and_dtype_numbers_are_tffs():
  assert [tff_wire.CREATE_VALUE_VALUE, tff_wire.CREATE_VALUE_EXECUTOR] == [
      _number(executor_pb2.CreateValueRequest, n) for n in ("value", "executor")]
  assert tff_wire.CREATE_VALUE_RESPONSE_REF == _number(executor_pb2.CreateValueResponse,
                                                       "value_ref")
  assert [tff_wire.COMPUTE_REF, tff_wire.COMPUTE_EXECUTOR] == [
      _number(executor_pb2.ComputeRequest, n) for n in ("value_ref", "executor")]
  assert tff_wire.COMPUTE_RESPONSE_VALUE == _number(executor_pb2.ComputeResponse, "value")
  assert tff_wire.REF_ID == _number(executor_pb2.ValueRef, "id")
  assert tff_wire.EXECUTOR_ID == _number(executor_pb2.ExecutorId, "id")
  assert [tff_wire.VALUE_STRUCT, tff_wire.VALUE_FEDERATED, tff_wire.VALUE_ARRAY] == [
      _number(executor_pb2.Value, n) for n in ("struct", "federated", "array")]
  assert [tff_wire.FEDERATED_TYPE, tff_wire.FEDERATED_VALUE] == [
      _number(executor_pb2.Value.Federated, n) for n in ("type", "value")]
  assert [tff_wire.STRUCT_ELEMENT, tff_wire.ELEMENT_VALUE] == [
      _number(executor_pb2.Value.Struct, "element"),
      _number(executor_pb2.Value.Struct.Element, "value")]
  assert [tff_wire.ARRAY_DTYPE, tff_wire.ARRAY_SHAPE, tff_wire.ARRAY_CONTENT] == [
      _number(array_pb2.Array, n) for n in ("dtype", "shape", "content")]
  assert tff_wire.SHAPE_DIM == _number(array_pb2.ArrayShape, "dim")
  assert {n: d.name for n, d in tff_wire.DTYPES.items()} == {
      data_type_pb2.DataType.Value("DT_FLOAT"): "float32",
      data_type_pb2.DataType.Value("DT_INT32"): "int32"}


def test_a_create_value_request_is_tffs_of_the_rows_at_the_clients():
  rows = np.arange(12, dtype=np.float32).reshape(4, 3) * 1.5
  type_spec = tff.FederatedType(tff.TensorType(np.float32, [None, 3]), tff.CLIENTS,
                                all_equal=True)
  federated = type_serialization.serialize_type(type_spec).federated.SerializeToString()
  request = executor_pb2.CreateValueRequest.FromString(
      tff_wire.create_value_request("executor-7", federated, rows))
  assert request.executor.id == "executor-7"
  assert request.value.federated.type.SerializeToString() == federated
  value, read_type = value_serialization.deserialize_value(request.value)
  np.testing.assert_array_equal(value, rows)
  assert type_spec.is_assignable_from(read_type)
  response = executor_pb2.CreateValueResponse(value_ref=executor_pb2.ValueRef(id="ref-3"))
  assert tff_wire.created_ref(response.SerializeToString()) == "ref-3"
  compute = executor_pb2.ComputeRequest.FromString(tff_wire.compute_request("e", "r"))
  assert (compute.executor.id, compute.value_ref.id) == ("e", "r")


def _array(value: np.ndarray, packed: bool = True) -> executor_pb2.Value:
  shape = array_pb2.ArrayShape(dim=value.shape)
  if not packed:  # Each dim a field of its own, as an unpacked writer sends it.
    tag = tff_wire.varint(tff_wire.SHAPE_DIM << 3)  # A varint field's.
    shape = array_pb2.ArrayShape.FromString(
        b"".join(tag + tff_wire.varint(d) for d in value.shape))
  return executor_pb2.Value(array=array_pb2.Array(
      dtype=data_type_pb2.DataType.Value("DT_FLOAT" if value.dtype == np.float32
                                         else "DT_INT32"),
      shape=shape, content=value.tobytes()))


def test_a_computed_federated_value_of_structs_reads_back_as_its_arrays():
  members = [(np.array([2, 5], np.int32), np.arange(6, dtype=np.float32).reshape(2, 3),
              np.array([1, 3], np.int32)),
             (np.zeros(0, np.int32), np.zeros((0, 3), np.float32), np.zeros(0, np.int32))]
  value = executor_pb2.Value(federated=executor_pb2.Value.Federated(value=[
      executor_pb2.Value(struct=executor_pb2.Value.Struct(element=[
          executor_pb2.Value.Struct.Element(value=_array(a, packed=i != 1))
          for i, a in enumerate(member)])) for member in members]))
  read = tff_wire.federated_structs(executor_pb2.ComputeResponse(value=value)
                                    .SerializeToString())
  assert len(read) == 2
  for got, expected in zip(read, members):
    for a, b in zip(got, expected):
      assert a.dtype == b.dtype
      np.testing.assert_array_equal(a, b)
