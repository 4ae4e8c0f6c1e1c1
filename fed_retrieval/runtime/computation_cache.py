"""A TFF remote executor that creates each computation in its worker once.

TFF's `RemoteExecutor` serializes the computation it runs and creates it in
the worker anew on every call, although a run calls the same few computations
(a round's `next`, `get_model_weights`, an evaluation) hundreds of times. The
worker keeps a value as long as a `RemoteValue` refers to it, so this executor
keeps the value of each computation it created and hands it back when the same
computation object is run again (TFF's compiler pipeline returns the same
compiled object every call). Batch-softmax FedAvg rounds on ml1m: 55-76 -> 47-49
ms; global softmax 283 -> 271 ms; the same weights after 48 rounds either way
(a fresh worker each, alternated; one-off script).

The cache lives with the executor's id in the worker: `set_cardinalities`
(a new id) and `close` empty it, so a value of a worker executor that was
disposed is never reused.
"""

from typing import Any, Dict, Tuple

import tensorflow_federated as tff


class ComputationCachingRemoteExecutor(tff.framework.RemoteExecutor):
  """`tff.framework.RemoteExecutor` whose computations are created once per
  executor id; every other value as before."""

  def __init__(self, *args, **kwargs):
    super().__init__(*args, **kwargs)
    # id(computation) -> (the computation, kept alive so its id is not
    # reused; its value in the worker).
    self._computations: Dict[int, Tuple[Any, Any]] = {}

  async def create_value(self, value, type_spec=None):
    if not isinstance(value, tff.framework.ConcreteComputation):
      return await super().create_value(value, type_spec)
    cached = self._computations.get(id(value))
    if cached is None:
      cached = (value, await super().create_value(value, type_spec))
      self._computations[id(value)] = cached
    return cached[1]

  def set_cardinalities(self, cardinalities) -> None:
    self._computations.clear()
    super().set_cardinalities(cardinalities)

  def close(self) -> None:
    self._computations.clear()
    super().close()
