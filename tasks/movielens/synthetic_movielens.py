"""A deterministic, MovieLens-shaped synthetic ratings log: the embedded default data.

Why synthetic: nothing is downloaded at run time, yet the experiments need data
with the properties that make federated retrieval hard:
- taste clusters: every item belongs to one genre and every user draws most of
  their items from one or two favourite genres (a Dirichlet with small
  concentration), so one client's in-batch negatives are few and alike;
- skewed popularity: item weights follow a Zipf law;
- sequential dependence: with probability `sequel_probability` the next item is
  one of a few fixed successors of the most recent item (sequels, series), so the
  next item is predictable from the recent ones beyond popularity.
Items are never repeated within a user, as in MovieLens. The log is written in
the `ratings.dat` format so the same loader reads real and synthetic data.
"""

import dataclasses
from typing import Tuple

import numpy as np
import pandas as pd


@dataclasses.dataclass(frozen=True)
class SyntheticConfig:
  """Shape and statistics of a synthetic ratings log."""
  num_users: int
  num_items: int
  num_genres: int
  mean_ratings_per_user: float
  min_ratings_per_user: int
  max_ratings_per_user: int
  genre_concentration: float = 0.08
  popularity_exponent: float = 1.0
  sequel_probability: float = 0.5
  successors_per_item: int = 3
  seed: int = 0


PRESETS = {
    # Seconds to generate and train on: for tests.
    "small": SyntheticConfig(num_users=300, num_items=400, num_genres=10,
                             mean_ratings_per_user=40, min_ratings_per_user=8,
                             max_ratings_per_user=150),
    # MovieLens-1M shaped: 6,040 users, 3,952 items, ~1M ratings.
    "ml1m": SyntheticConfig(num_users=6040, num_items=3952, num_genres=18,
                            mean_ratings_per_user=165, min_ratings_per_user=20,
                            max_ratings_per_user=1500),
    # The same shape with other statistics and seed: broader tastes, flatter
    # popularity, weaker sequels. Defaults chosen on `ml1m` are checked here.
    "ml1m_alt": SyntheticConfig(num_users=6040, num_items=3952, num_genres=18,
                                mean_ratings_per_user=165, min_ratings_per_user=20,
                                max_ratings_per_user=1500, genre_concentration=0.2,
                                popularity_exponent=0.8, sequel_probability=0.3,
                                seed=1),
}


def preset(name: str) -> SyntheticConfig:
  if name not in PRESETS:
    raise ValueError(f"--synthetic: unknown preset '{name}'; choose one of "
                     f"{sorted(PRESETS)}")
  return PRESETS[name]


def _timeline_lengths(config: SyntheticConfig, rng: np.random.Generator) -> np.ndarray:
  """Heavy-tailed ratings-per-user counts with the configured mean and bounds."""
  sigma = 1.0
  excess_mean = config.mean_ratings_per_user - config.min_ratings_per_user
  mu = np.log(max(excess_mean, 1.0)) - sigma**2 / 2
  lengths = config.min_ratings_per_user + rng.lognormal(mu, sigma, config.num_users)
  upper = min(config.max_ratings_per_user, config.num_items // 2)
  return np.clip(np.round(lengths), config.min_ratings_per_user, upper).astype(np.int64)


def generate(config: SyntheticConfig) -> Tuple[pd.DataFrame, np.ndarray]:
  """Returns (ratings, item_genre): the log and each item id's genre (-1 for 0)."""
  rng = np.random.default_rng(config.seed)
  num_items, num_genres = config.num_items, config.num_genres
  item_ids = np.arange(1, num_items + 1)
  item_genre = np.full(num_items + 1, -1, np.int64)
  item_genre[1:] = rng.integers(0, num_genres, num_items)
  popularity = np.zeros(num_items + 1)
  popularity[1:] = rng.permutation(
      1.0 / np.arange(1, num_items + 1)**config.popularity_exponent)

  # Per-genre cumulative popularity, for vectorized sampling of an item in a genre.
  genre_items = [item_ids[item_genre[1:] == g] for g in range(num_genres)]
  genre_cdfs = [np.cumsum(popularity[items]) / popularity[items].sum()
                for items in genre_items]

  def sample_in_genre(genres: np.ndarray) -> np.ndarray:
    result = np.empty(genres.size, np.int64)
    uniforms = rng.random(genres.size)
    for g in np.unique(genres):
      rows = genres == g
      index = np.searchsorted(genre_cdfs[g], uniforms[rows], side="right")
      result[rows] = genre_items[g][np.minimum(index, genre_items[g].size - 1)]
    return result

  successors = np.zeros((num_items + 1, config.successors_per_item), np.int64)
  successors[1:] = sample_in_genre(
      np.repeat(item_genre[1:], config.successors_per_item)).reshape(
          num_items, config.successors_per_item)

  tastes = rng.dirichlet(np.full(num_genres, config.genre_concentration),
                         config.num_users)
  taste_cdfs = np.cumsum(tastes, axis=1)
  lengths = _timeline_lengths(config, rng)
  num_users = config.num_users
  seen = np.zeros((num_users, num_items + 1), bool)
  seen[:, 0] = True
  timeline = np.zeros((num_users, lengths.max()), np.int64)
  previous = np.zeros(num_users, np.int64)
  for step in range(lengths.max()):
    active = np.flatnonzero(lengths > step)
    genres = (taste_cdfs[active] < rng.random((active.size, 1))).sum(axis=1)
    candidates = sample_in_genre(np.minimum(genres, num_genres - 1))
    follow = (previous[active] > 0) & (rng.random(active.size) < config.sequel_probability)
    picks = rng.integers(0, config.successors_per_item, active.size)
    candidates[follow] = successors[previous[active][follow], picks[follow]]
    for _ in range(10):  # Re-draw items the user already rated.
      repeated = seen[active, candidates]
      if not repeated.any():
        break
      candidates[repeated] = sample_in_genre(
          item_genre[candidates[repeated]])
    repeated = seen[active, candidates]
    for row in np.flatnonzero(repeated):  # Rare: fall back to any unseen item.
      unseen = np.flatnonzero(~seen[active[row]])
      candidates[row] = unseen[rng.integers(0, unseen.size)]
    seen[active, candidates] = True
    timeline[active, step] = candidates
    previous[active] = candidates

  user_index = np.repeat(np.arange(num_users), lengths)
  step_index = np.arange(user_index.size) - np.repeat(
      np.cumsum(lengths) - lengths, lengths)
  start_times = 956_703_932 + rng.integers(0, 86_400 * 365, num_users)
  gaps = np.cumsum(rng.integers(1, 3_600, user_index.size))
  user_starts = np.cumsum(lengths) - lengths
  elapsed = gaps - np.repeat(gaps[user_starts], lengths)
  timestamps = start_times[user_index] + elapsed
  ratings = pd.DataFrame({
      "user_id": user_index + 1,
      "item_id": timeline[user_index, step_index],
      "rating": rng.integers(1, 6, user_index.size).astype(np.float32),
      "timestamp": timestamps,
  })
  return ratings, item_genre
