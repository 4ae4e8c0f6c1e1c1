"""The synthetic data is deterministic, MovieLens-shaped, non-IID and predictable."""

import numpy as np
import pytest

from tasks.movielens import sequence_examples as se
from tasks.movielens import synthetic_movielens as sm


@pytest.fixture(scope="module")
def small():
  return sm.generate(sm.preset("small"))


def entropy(values: np.ndarray, size: int) -> float:
  p = np.bincount(values, minlength=size) / values.size
  p = p[p > 0]
  return float(-(p * np.log(p)).sum())


def test_deterministic_from_seed(small):
  again, _ = sm.generate(sm.preset("small"))
  assert again.equals(small[0])


def test_shape_of_small_preset(small):
  ratings, item_genre = small
  config = sm.preset("small")
  assert ratings["user_id"].nunique() == config.num_users
  assert ratings["item_id"].min() >= 1 and ratings["item_id"].max() <= config.num_items
  per_user = ratings.groupby("user_id").size()
  assert per_user.min() >= config.min_ratings_per_user
  assert 0.7 * config.mean_ratings_per_user < per_user.mean() < 1.3 * config.mean_ratings_per_user
  assert not ratings.duplicated(["user_id", "item_id"]).any()  # No repeats.
  assert (ratings.groupby("user_id")["timestamp"].diff().dropna() > 0).all()
  assert item_genre.shape == (config.num_items + 1,)


def test_popularity_is_skewed(small):
  counts = np.sort(np.bincount(small[0]["item_id"]))[::-1]
  top_tenth = counts[:counts.size // 10].sum() / counts.sum()
  assert top_tenth > 0.2  # Uniform popularity would give 0.1.


def test_clients_are_non_iid(small):
  ratings, item_genre = small
  genres = item_genre[ratings["item_id"].to_numpy()]
  size = item_genre.max() + 1
  global_entropy = entropy(genres, size)
  per_user = [entropy(genres[ratings["user_id"].to_numpy() == u], size)
              for u in np.unique(ratings["user_id"])]
  assert np.mean(per_user) < 0.6 * global_entropy


def test_next_item_is_predictable_beyond_popularity(small):
  examples = se.sliding_window_examples(small[0])
  train, test = se.split_by_user(examples, (0.8, 0.2), seed=0)
  vocabulary = int(small[0]["item_id"].max()) + 1
  popular = np.argsort(-np.bincount(train.labels, minlength=vocabulary))[:10]
  popularity_recall = np.isin(test.labels, popular).mean()
  transitions = np.zeros((vocabulary, vocabulary))
  np.add.at(transitions, (train.contexts[:, 0], train.labels), 1)
  top10 = np.argsort(-transitions[test.contexts[:, 0]], axis=1)[:, :10]
  bigram_recall = (top10 == test.labels[:, None]).any(axis=1).mean()
  assert bigram_recall > 2 * popularity_recall, (bigram_recall, popularity_recall)


def test_ml1m_preset_is_movielens_sized():
  config = sm.preset("ml1m")
  assert (config.num_users, config.num_items) == (6040, 3952)
  assert 0.9e6 < config.num_users * config.mean_ratings_per_user < 1.1e6


def test_unknown_preset_names_the_flag():
  with pytest.raises(ValueError, match="--synthetic: unknown preset 'huge'"):
    sm.preset("huge")
