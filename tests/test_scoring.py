"""Scoring against candidate sets and the chunked top-k, against NumPy."""

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.models import scoring
from losses.retrieval_losses import GlobalSoftmaxLoss


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


def test_a_loss_over_candidate_scores_is_the_softmax_over_the_candidates(table):
  queries = np.random.default_rng(3).normal(size=(4, 5)).astype(np.float32)
  candidates = np.array([[7, 2, 9], [1, 0, 4], [3, 8, 6], [5, 11, 2]])
  positions = np.array([0, 2, 1, 0])  # Where each positive sits in its set.
  scores = scoring.candidate_scores(queries, table.astype(np.float32), candidates)
  loss = GlobalSoftmaxLoss(temperature=0.5, reduction="none")(positions, scores).numpy()
  logits = np.einsum("bd,bkd->bk", queries, table[candidates]) / 0.5
  expected = -(logits[np.arange(4), positions] - np.log(np.exp(logits).sum(1)))
  np.testing.assert_allclose(loss, expected, rtol=1e-5, atol=1e-6)
