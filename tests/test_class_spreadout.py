"""The server spreadout step and its nearest-class search against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from losses import class_spreadout
from tests.spreadout_reference import numpy_all_pairs_step
from tests.spreadout_reference import numpy_topk_step
from tests.spreadout_reference import unit


@pytest.fixture
def table():
  return np.random.default_rng(0).normal(size=(30, 5))


def test_nearest_classes_excludes_the_class_itself(table):
  ids = np.array([3, 10, 29])
  found = class_spreadout.nearest_classes(tf.constant(table), ids, 4,
                                          max_scores_in_memory=40).numpy()
  u = unit(table)
  for row, c in zip(found, ids):
    cos = u @ u[c]
    cos[c] = -np.inf
    np.testing.assert_array_equal(row, np.argsort(-cos, kind="stable")[:4])


def test_topk_step_matches_numpy(table):
  ids = np.array([0, 7, 8])
  new = class_spreadout.spreadout_step(tf.constant(table), ids, 0.1, "topk", k=3,
                                       max_scores_in_memory=64)
  np.testing.assert_allclose(new.numpy(), numpy_topk_step(table, ids, 3, 0.1), atol=1e-6)


def test_topk_step_on_given_neighbours_matches_numpy(table):
  """On the rows it moves, with the exact neighbours given, the closed-form
  step is the autodiff one's (`numpy_topk_step`'s)."""
  ids = np.array([0, 7, 8])
  u = unit(table)
  cos = u[ids] @ u.T
  cos[np.arange(3), ids] = -np.inf
  neighbours = np.argsort(-cos, axis=1, kind="stable")[:, :3]
  rows = np.unique(np.concatenate([ids, neighbours.ravel()]))
  position = {r: i for i, r in enumerate(rows)}
  new = class_spreadout.topk_step(
      tf.constant(table[rows], tf.float32), np.array([position[c] for c in ids]),
      np.vectorize(position.get)(neighbours), 0.1)
  np.testing.assert_allclose(new.numpy(), numpy_topk_step(table, ids, 3, 0.1)[rows],
                             atol=1e-6)


def test_topk_step_is_a_gradient_step_on_the_regularizer():
  """Any neighbours (a row both updated and a neighbour, a class padded with
  itself): rows - lr * the tape's gradient of `topk_regularizer`."""
  rng = np.random.default_rng(1)
  rows = tf.constant(rng.normal(size=(40, 6)), tf.float32)
  ids = np.sort(rng.choice(40, 12, replace=False)).astype(np.int32)
  neighbours = rng.integers(0, 40, (12, 4)).astype(np.int32)
  neighbours[0, 3], neighbours[5, 0], neighbours[6, 1] = ids[0], ids[5], ids[2]
  with tf.GradientTape() as tape:
    tape.watch(rows)
    value = class_spreadout.topk_regularizer(tf.gather(rows, ids), tf.gather(rows, neighbours))
  expected = rows - 0.2 * tf.convert_to_tensor(tape.gradient(value, rows))
  new = class_spreadout.topk_step(rows, ids, neighbours, 0.2)
  np.testing.assert_allclose(new.numpy(), expected.numpy(), atol=1e-6)
  assert np.abs(new.numpy() - rows.numpy()).max() > 0.01


def test_all_pairs_step_matches_numpy(table):
  ids = np.array([2, 5])
  new = class_spreadout.spreadout_step(tf.constant(table), ids, 0.05, "all", margin=1.2)
  np.testing.assert_allclose(new.numpy(), numpy_all_pairs_step(table, ids, 1.2, 0.05),
                             atol=1e-6)


def test_a_step_spreads_close_classes_apart():
  close = unit(np.array([[1.0, 0.0, 0.0], [0.99, 0.1, 0.0], [0.98, 0.0, 0.1],
                         [0.0, 1.0, 0.0]]))
  for mode in class_spreadout.SPREADOUT_MODES:
    new = class_spreadout.spreadout_step(tf.constant(close), np.array([0, 1, 2]), 0.05,
                                         mode, k=2, margin=1.0).numpy()
    u, v = unit(close), unit(new)
    assert (v[:3] @ v[:3].T)[np.triu_indices(3, 1)].max() < (
        u[:3] @ u[:3].T)[np.triu_indices(3, 1)].max(), mode
