"""Values sent to a TFF worker once and read by several calls there.

TFF's execution context serializes every argument of every call, and the
worker parses it anew, although a program's calls may read one large value:
the calls of a sub-model round on one worker all read the embedding bag.
The context's executor can create a value in the worker by itself; a call
given that value (an executor value) passes it on as it is, without
serializing it again, and the worker keeps it while Python refers to it.

A worker keeps an executor per number of clients a call has (TFF's
`ResourceManagingExecutorFactory`), and a value lives in one executor, so a
value is created per worker and per client count, when a call first needs
it. A context that is not one of TFF's execution contexts over an executor
factory (a test's stand-in, TFF's mergeable context) gets the value itself.
"""

import asyncio
from typing import Any, Optional

import tensorflow_federated as tff


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
  # A remote executor's methods block on the worker's answer: any event loop
  # runs them, and none is running in this thread.
  return asyncio.run(executor.create_value(value, type_spec))

