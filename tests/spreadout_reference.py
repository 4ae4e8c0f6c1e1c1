"""NumPy references of the server spreadout step (tests of the step and of
FedAwS), and tables like trained ones (tests of its neighbour search)."""

import numpy as np


def unit(x):
  return x / np.linalg.norm(x, axis=-1, keepdims=True)


def unit_grad(w, grad_of_unit):
  """d f / d w for f(w / |w|), row-wise: (I - u u^T) g / |w|."""
  u = unit(w)
  norm = np.linalg.norm(w, axis=-1, keepdims=True)
  return (grad_of_unit - np.sum(grad_of_unit * u, -1, keepdims=True) * u) / norm


def numpy_topk_step(table, ids, k, lr):
  u = unit(table)
  grad_u = np.zeros_like(table)
  for c in ids:
    cos = u @ u[c]
    cos[c] = -np.inf
    for y in np.argsort(-cos, kind="stable")[:k]:
      # reg = -|u_c - u_y|^2 = 2 u_c.u_y - 2
      grad_u[c] += 2 * u[y]
      grad_u[y] += 2 * u[c]
  return table - lr * unit_grad(table, grad_u)


def numpy_all_pairs_step(table, ids, margin, lr):
  u = unit(table)
  grad_u = np.zeros_like(table)
  for c in ids:
    for other in range(len(table)):
      if other == c:
        continue
      diff = u[c] - u[other]
      d = np.linalg.norm(diff)
      hinge = max(margin - d, 0.0)
      # reg term hinge^2: d/du_c = -2 hinge diff / d
      grad_u[c] += -2 * hinge * diff / d
      grad_u[other] += 2 * hinge * diff / d
  return table - lr * unit_grad(table, grad_u)


def clustered_table(num_rows, dim, clusters, spread, seed):
  """Rows scattered around `clusters` random directions, as trained classes are."""
  rng = np.random.default_rng(seed)
  centres = rng.standard_normal((clusters, dim))
  rows = centres[rng.integers(0, clusters, num_rows)] + spread * rng.standard_normal(
      (num_rows, dim))
  return rows.astype(np.float32)
