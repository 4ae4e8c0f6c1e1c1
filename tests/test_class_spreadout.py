"""The server spreadout step and the chunked nearest-row search against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.models import scoring
from losses import class_spreadout
from tests.spreadout_reference import numpy_all_pairs_step
from tests.spreadout_reference import numpy_topk_step
from tests.spreadout_reference import unit


@pytest.fixture
def table():
  return np.random.default_rng(0).normal(size=(30, 5))


def test_chunked_top_k_matches_numpy_for_any_chunk(table):
  queries = np.random.default_rng(1).normal(size=(17, 5))
  expected = np.argsort(-(queries @ table.T), axis=1, kind="stable")[:, :4]
  for budget in (1, 30, 31 * 7, 10_000):  # One query per block ... all at once.
    values, ids = scoring.chunked_top_k(tf.constant(queries), tf.constant(table), 4, budget)
    np.testing.assert_array_equal(ids.numpy(), expected)
    np.testing.assert_allclose(values.numpy(),
                               np.take_along_axis(queries @ table.T, expected, 1),
                               rtol=1e-6)


def test_candidate_scores_for_a_shared_set_and_per_query_sets(table):
  queries = np.random.default_rng(2).normal(size=(3, 5))
  shared = np.array([4, 0, 9])
  np.testing.assert_allclose(
      scoring.candidate_scores(queries, table, shared).numpy(), queries @ table[shared].T,
      rtol=1e-6)
  per_query = np.array([[1, 2], [3, 4], [5, 6]])
  np.testing.assert_allclose(
      scoring.candidate_scores(queries, table, per_query).numpy(),
      np.einsum("bd,bkd->bk", queries, table[per_query]), rtol=1e-6)


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
