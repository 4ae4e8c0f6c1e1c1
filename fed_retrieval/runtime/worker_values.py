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
arguments must for TFF's context.
"""

import asyncio
import contextlib
from typing import Any, Optional

import tensorflow_federated as tff
from tensorflow_federated.python.core.impl.executors import cardinality_carrying_base
from tensorflow_federated.python.core.impl.executors import remote_executor


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
  if isinstance(type_spec, tff.FederatedType) and not type_spec.all_equal:
    return _WithClients(made, clients)
  return made


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

