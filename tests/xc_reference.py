"""NumPy references and TFF type walks shared by the XC algorithm tests."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.models import xc_encoder
from tasks import client_data

# The small XC model and three clients the algorithm tests train by hand.
MODEL = xc_encoder.XCEncoderConfig(num_features=4, num_labels=5, bag_dim=3,
                                   hidden_dims=(), embedding_dim=2)
WIDTH = 2  # Features per point.
# Three clients: two hold class 1 (its row is averaged over both), one class 3.
CLIENTS = [
    (np.array([[1, 2], [3, 0], [4, 1]]), np.array([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]]),
     np.array([1, 1, 1])),
    (np.array([[2, 4], [1, 3]]), np.array([[0.7, 0.3], [0.4, 0.6]]), np.array([1, 1])),
    (np.array([[3, 4], [2, 0]]), np.array([[0.9, 0.1], [1.0, 0.0]]), np.array([3, 3])),
]


def dataset(ids, values, labels):
  return tf.data.Dataset.from_tensor_slices(
      ((ids.astype(np.int32), values.astype(np.float32)), labels.astype(np.int32))).batch(8)


def round_data(clients, shards=None):
  """A round's datasets of `clients` (ids, values, labels): one each, or with
  `shards` (lists of client positions) one shard dataset of each list, as a
  sharded process takes them."""
  if shards is None:
    return [dataset(*c) for c in clients]
  sizes = np.cumsum([0] + [len(c[2]) for c in clients])
  data = client_data.ClientDatasets(
      (np.concatenate([c[0] for c in clients]).astype(np.int32),
       np.concatenate([c[1] for c in clients]).astype(np.float32)),
      np.concatenate([c[2] for c in clients]).astype(np.int32),
      {str(i): np.arange(sizes[i], sizes[i + 1]) for i in range(len(clients))})
  return [data.shard_dataset([str(i) for i in shard], 8, 1, [None] * len(shard))
          for shard in shards]


def numpy_tower(weights, ids, values, normalize=True):
  """The XC instance tower (bag, then one Dense layer), L2-normalized unless
  not `normalize`, in NumPy."""
  bag, kernel, bias = weights
  v = np.where(ids > 0, values, 0.0)
  hidden = np.einsum("bf,bfd->bd", v / np.abs(v).sum(1, keepdims=True), bag[ids])
  out = hidden @ kernel + bias
  return out / np.linalg.norm(out, axis=1, keepdims=True) if normalize else out


def numeric_grad(f, x, eps=1e-6):
  grad = np.zeros_like(x)
  for index in np.ndindex(x.shape):
    up, down = x.copy(), x.copy()
    up[index] += eps
    down[index] -= eps
    grad[index] = (f(up) - f(down)) / (2 * eps)
  return grad


def federated_shapes(type_spec, placement):
  """Shapes of every tensor inside values placed at `placement`."""
  shapes = []
  if isinstance(type_spec, tff.FederatedType):
    if type_spec.placement is placement:
      shapes += [tuple(t.shape) for t in tensors(type_spec.member)]
  elif isinstance(type_spec, tff.FunctionType):
    if type_spec.parameter is not None:
      shapes += federated_shapes(type_spec.parameter, placement)
    shapes += federated_shapes(type_spec.result, placement)
  elif isinstance(type_spec, tff.StructType):
    for _, member in tff.structure.iter_elements(type_spec):
      shapes += federated_shapes(member, placement)
  return shapes


def tensors(type_spec):
  if isinstance(type_spec, tff.TensorType):
    return [type_spec]
  if isinstance(type_spec, tff.SequenceType):
    return tensors(type_spec.element)
  if isinstance(type_spec, tff.StructType):
    return [t for _, m in tff.structure.iter_elements(type_spec) for t in tensors(m)]
  return []


def all_client_shapes(process):
  """Shapes of every value at the clients in the process's TFF computations:
  a stock process's `next`, or a sub-model process's key and round computations
  (its server answers the clients from Python)."""
  computations = [getattr(process, name) for name in ("client_keys", "client_round")
                  if hasattr(process, name)] or [process.next]
  shapes, stack = set(), [c.to_building_block() for c in computations]
  while stack:
    block = stack.pop()
    shapes |= set(federated_shapes(block.type_signature, tff.CLIENTS))
    stack.extend(block.children())
  return shapes


def numeric_sgd_step(tower, rows, loss, learning_rate):
  """One SGD step of `loss(tower, rows)` on every weight, by central differences."""
  new_tower = []
  for i in range(len(tower)):
    def f(x, i=i):
      changed = list(tower)
      changed[i] = x
      return loss(changed, rows)
    new_tower.append(tower[i] - learning_rate * numeric_grad(f, tower[i]))
  return new_tower, rows - learning_rate * numeric_grad(lambda r: loss(tower, r), rows)


def server_average(tower, table, tower_deltas, sizes, row_deltas):
  """The example-weighted mean tower delta (server SGD at 1.0) and each held
  row's mean delta over its holders ({row: [deltas]}), applied."""
  new_tower = [w + sum(s * d[i] for s, d in zip(sizes, tower_deltas)) / sum(sizes)
               for i, w in enumerate(tower)]
  new_table = table.copy()
  for row, deltas in row_deltas.items():
    new_table[row] += np.mean(deltas, axis=0)
  return new_tower, new_table
