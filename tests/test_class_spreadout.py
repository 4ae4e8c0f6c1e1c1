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
