"""Values sent to a TFF worker once and read by several calls there.

TFF's execution context serializes every argument of every call, and the
worker parses it anew, although a program's calls may read one large value:
the calls of a sub-model round on one worker all read the embedding bag, and
a call's clients' data is read by their keys' computation and their training.
The context's executor can create a value in the worker by itself; a call
given that value (an executor value) passes it on as it is, without
serializing it again, and the worker keeps it while Python refers to it.

A worker keeps an executor per number of clients a call has (TFF's
`ResourceManagingExecutorFactory`), and a value lives in one executor, so a
value is created per worker and per client count, when a call first needs
it. A context that is not one of TFF's execution contexts over an executor
factory (a test's stand-in, TFF's mergeable context) gets the value itself;
one with a `turn` (a lock, `tff_runtime.OneCallAtATime`) makes it in turn. A
value with a member per client says how many clients it has, as a call's
arguments must for TFF's context. A call's result can stay in the worker
too (`invoke_holding`: a pair, the first part sent back, the second held
for a later call), as a sub-model round's clients' bag keys do, or parts of
it (`invoke_keeping`). Another process can create a value in a worker's
executor, or read one held there, given where it is (`placed`); the driver
then refers to what it created (`adopted`): a table server's rows
(`served_table`).
"""

import asyncio
import contextlib
import functools
from typing import Any, List, Optional, Sequence, Tuple

import tensorflow_federated as tff
from tensorflow_federated.python.core.impl.executors import cardinality_carrying_base
from tensorflow_federated.python.core.impl.executors import remote_executor
from tensorflow_federated.python.core.impl.types import type_conversions


def _context_or_default(context: Optional[Any]) -> Any:
  """`context`, or TFF's default one when None (the one local worker's)."""
  return context if context is not None else tff.framework.get_context_stack().current


def invoke(context: Optional[Any], computation, *args) -> Any:
  """`computation(*args)` in `context` (None: the default one). Several
  arguments go as TFF packs a call's (a struct of them), so an executor
  value among them reaches the worker as the reference it is."""
  arg = args[0] if len(args) == 1 else tff.structure.Struct([(None, a) for a in args])
  return _context_or_default(context).invoke(computation, arg)


def created(context: Optional[Any], value: Any, type_spec: tff.types.Type,
            clients: int) -> Any:
  """`value`, of `type_spec`, created in the worker behind `context` (None:
  the default context) for its calls of `clients` clients; `value` itself
  where the context cannot hold it."""
  context = _context_or_default(context)
  factory = getattr(context, "executor_factory", None)
  if factory is None:
    return value
  executor = factory.create_executor({tff.CLIENTS: clients})
  with getattr(context, "turn", None) or contextlib.nullcontext():
    # A remote executor's methods block on the worker's answer: any event
    # loop runs them, and none is running in this thread.
    made = asyncio.run(executor.create_value(value, type_spec))
  return _counted(made, type_spec, clients)


def _counted(held, type_spec: tff.types.Type, clients: int) -> Any:
  """`held`, a worker's value of `type_spec`, saying it has `clients`
  members when it has one a client (`_WithClients`)."""
  if isinstance(type_spec, tff.FederatedType) and not type_spec.all_equal:
    return _WithClients(held, clients)
  return held


@functools.lru_cache(maxsize=16)
def _native(computation):
  """`computation` compiled as the project's worker contexts compile it
  (`tff_runtime`), once: the same object each call, which the worker's
  executor then creates once (`computation_cache`)."""
  return tff.backends.native.desugar_and_transform_to_native(computation)


def invoke_holding(context: Optional[Any], computation, clients: int, *args
                   ) -> Tuple[Any, Any]:
  """`computation(*args)`, whose result is a pair, run on `clients` clients
  in the worker behind `context` (None: the default context): (the first
  element, sent back as `invoke` sends a result; the second, left in the
  worker as a value a later call reads, with `clients` members when
  federated). Where the context cannot hold values both come back."""
  (sent,), (held,) = invoke_keeping(context, computation, clients, (1,), *args)
  return sent, held


def invoke_keeping(context: Optional[Any], computation, clients: int,
                   kept: Sequence[int], *args) -> Tuple[List[Any], List[Any]]:
  """`computation(*args)`, whose result is a struct, run on `clients` clients
  in the worker behind `context` (None: the default context): (its other
  elements, sent back in one answer as `invoke` sends a result; its
  elements at `kept`, left in the worker as values a later call, or another
  process, reads, with `clients` members when federated). Where the context
  cannot hold values every element comes back."""
  context = _context_or_default(context)
  factory = getattr(context, "executor_factory", None)
  if factory is None:
    result = invoke(context, computation, *args)
    return ([result[i] for i in range(len(result)) if i not in kept],
            [result[i] for i in kept])
  native = _native(computation)
  parameter, result_type = native.type_signature.parameter, computation.type_signature.result
  sent_at = [i for i in range(len(result_type)) if i not in kept]
  executor = factory.create_executor({tff.CLIENTS: clients})

  async def call():
    elements = tff.structure.to_elements(parameter) if len(args) > 1 else [(None, parameter)]
    # TF's tensors as NumPy's.
    made = [a if isinstance(a, remote_executor.RemoteValue) else
            await executor.create_value(tff.tensorflow.transform_args(a), t)
            for a, (_, t) in zip(args, elements)]
    arg = made[0] if len(args) == 1 else await executor.create_struct(
        tff.structure.Struct([(name, m) for (name, _), m in zip(elements, made)]))
    result = await executor.create_call(
        await executor.create_value(native, native.type_signature), arg)
    sent = [await executor.create_selection(result, i) for i in sent_at]
    sent = sent[0] if len(sent) == 1 else await executor.create_struct(sent)
    sent = await sent.compute()
    return sent, [await executor.create_selection(result, i) for i in kept]

  with getattr(context, "turn", None) or contextlib.nullcontext():
    sent, held = asyncio.run(call())  # As in `created`.
  values = ([sent] if len(sent_at) == 1 else
            [v for _, v in tff.structure.iter_elements(sent)])
  sent = [tff.tensorflow.transform_result(type_conversions.type_to_py_container(
      value, result_type[i])) for value, i in zip(values, sent_at)]
  return sent, [_counted(h, result_type[i], clients) for h, i in zip(held, kept)]


def placed(context: Optional[Any], clients: int) -> Tuple[str, str]:
  """(the address of the worker behind `context` (None: the default
  context), the id there of its executor for calls of `clients` clients):
  where another process creates values a call reads and reads the values a
  call left (`served_table`)."""
  executor = _context_or_default(context).executor_factory.create_executor(
      {tff.CLIENTS: clients})
  return executor.placed()


def adopted(context: Optional[Any], clients: int, ref_id: str, type_spec) -> Any:
  """The value `ref_id`, of `type_spec`, that another process created in the
  executor of `placed(context, clients)`, freed in the worker when dropped."""
  executor = _context_or_default(context).executor_factory.create_executor(
      {tff.CLIENTS: clients})
  return _counted(executor.adopted(ref_id, type_spec), type_spec, clients)


class _WithClients(remote_executor.RemoteValue, cardinality_carrying_base.CardinalityCarrying):
  """A value a worker holds, one member per client, that says how many
  clients it has: TFF's context infers a call's client count from its
  arguments, and a worker's value does not carry one. It refers to the
  value `held` refers to (which frees it in the worker when dropped)."""

  def __init__(self, held, clients: int):  # pylint: disable=super-init-not-called
    self._held, self._clients = held, clients

  @property
  def type_signature(self):
    return self._held.type_signature

  @property
  def reference(self):
    return self._held.reference

  @property
  def cardinality(self):
    return {tff.CLIENTS: self._clients}

  async def compute(self):
    return await self._held.compute()

