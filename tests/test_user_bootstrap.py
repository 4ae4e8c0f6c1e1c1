"""The user bootstrap: standard errors against closed forms, pairing by hand."""

import numpy as np
import pytest

from fed_retrieval.evaluation import user_bootstrap


def users_with_hits(hits_per_user, examples_per_user):
  """Hits [N] and user ids [N]: user u holds `examples_per_user[u]` examples,
  the first `hits_per_user[u]` of them hits."""
  hits, users = [], []
  for user, (h, n) in enumerate(zip(hits_per_user, examples_per_user)):
    hits += [1] * h + [0] * (n - h)
    users += [user] * n
  return np.array(hits), np.array(users)


def test_recall_standard_error_matches_the_mean_of_users():
  # Equal counts: a draw's recall is the mean of its users' recalls, so the
  # bootstrap standard error is their population std / sqrt(U).
  rng = np.random.default_rng(3)
  per_user = rng.integers(0, 40, size=50)
  hits, users = users_with_hits(per_user, [40] * 50)
  expected = np.std(per_user / 40) / np.sqrt(50)
  assert user_bootstrap.recall_standard_error(hits, users) == pytest.approx(
      expected, rel=0.05)


def test_one_users_examples_move_together():
  # The binomial error over 1,000 examples would be ~0.009; two users, one of
  # whom hits everything and one nothing, leave the recall at 0, 0.5 or 1.
  hits, users = users_with_hits([500, 0], [500, 500])
  recalls = user_bootstrap.resampled_recalls(hits, users)[:, 0]
  assert set(np.round(recalls, 6)) == {0.0, 0.5, 1.0}
  assert user_bootstrap.recall_standard_error(hits, users) == pytest.approx(
      np.sqrt(0.125), rel=0.05)


def test_paired_drop_of_a_model_that_hits_nine_tenths_on_every_user():
  # Recalls differ a lot between users, but the second model hits 0.9 of the
  # first's on every user: every paired draw has the same 10% drop.
  reference, users = users_with_hits([10, 20, 30, 5], [100] * 4)
  model = 0.9 * reference  # Fractional hits: 9, 18, 27 and 4.5 a user.
  drop, error = user_bootstrap.relative_drop(reference, model, users)
  assert drop == pytest.approx(0.1)
  assert error == pytest.approx(0.0, abs=1e-12)
  assert user_bootstrap.recall_standard_error(reference, users) > 0.02


def test_identical_models_have_no_drop():
  hits, users = users_with_hits([3, 7, 1], [10, 20, 5])
  assert user_bootstrap.relative_drop(hits, hits, users) == (0.0, 0.0)


def test_draws_are_seeded_and_shared_by_models():
  hits, users = users_with_hits([3, 7, 1, 9], [10, 20, 5, 9])
  first = user_bootstrap.resampled_recalls(np.stack([hits, 1 - hits]), users, 50)
  again = user_bootstrap.resampled_recalls(np.stack([hits, 1 - hits]), users, 50)
  np.testing.assert_array_equal(first, again)
  np.testing.assert_allclose(first.sum(axis=1), 1.0)  # The same users each draw.


def test_bad_input():
  with pytest.raises(ValueError, match="same non-empty examples"):
    user_bootstrap.resampled_recalls(np.ones(3), np.zeros(4))
  with pytest.raises(ValueError, match="reference recall is 0"):
    user_bootstrap.relative_drop(np.zeros(3), np.ones(3), np.arange(3))
