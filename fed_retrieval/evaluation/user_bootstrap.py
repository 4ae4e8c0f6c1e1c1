"""How precise a recall is on few test users: a bootstrap over users.

A test split of real ratings holds few users with many correlated examples
each (ml-latest-small: 61 test users, 10,436 examples), so the binomial
standard error over examples understates the uncertainty. Resampling users
with replacement keeps each user's examples together. Models evaluated on the
same users are resampled together (a paired bootstrap), so the relative drop
between two of them has a standard error of its own, far smaller than either
recall's when the two models err on the same users.
"""

from typing import Tuple

import numpy as np

RESAMPLES = 2000
SEED = 0


def resampled_recalls(hits: np.ndarray, user_ids: np.ndarray,
                      resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
  """Recall of each model on `resamples` bootstrap draws of the users.

  `hits` [M, N] (bool or 0/1): whether model m ranked example n's item within
  k; `user_ids` [N]: the example's user. Each draw takes as many users as the
  split holds, with replacement, and pools their examples; every model sees
  the same draws. Returns [resamples, M].
  """
  hits = np.atleast_2d(np.asarray(hits, dtype=np.float64))
  user_ids = np.asarray(user_ids)
  if hits.shape[1] != user_ids.shape[0] or not user_ids.size:
    raise ValueError(f"hits {hits.shape} and user_ids {user_ids.shape} must describe "
                     "the same non-empty examples")
  _, user_index = np.unique(user_ids, return_inverse=True)
  num_users = int(user_index.max()) + 1
  hits_per_user = np.stack([np.bincount(user_index, weights=h, minlength=num_users)
                            for h in hits])  # [M, U]
  examples_per_user = np.bincount(user_index, minlength=num_users)  # [U]
  draws = np.random.default_rng(seed).multinomial(
      num_users, np.full(num_users, 1.0 / num_users), size=resamples)  # [R, U]
  return (draws @ hits_per_user.T) / (draws @ examples_per_user)[:, None]


def recall_standard_error(hits: np.ndarray, user_ids: np.ndarray,
                          resamples: int = RESAMPLES, seed: int = SEED) -> float:
  """The bootstrap standard error of one model's recall."""
  return float(np.std(resampled_recalls(hits, user_ids, resamples, seed)[:, 0],
                      ddof=1))


def relative_drop(reference_hits: np.ndarray, hits: np.ndarray, user_ids: np.ndarray,
                  resamples: int = RESAMPLES, seed: int = SEED) -> Tuple[float, float]:
  """(drop, standard error) of `hits`' recall relative to `reference_hits`':
  (reference - recall) / reference on the examples as given, and its standard
  error over paired bootstrap draws of the users."""
  reference_hits = np.asarray(reference_hits, dtype=np.float64)
  hits = np.asarray(hits, dtype=np.float64)
  reference = reference_hits.mean()
  if not reference > 0:
    raise ValueError("the reference recall is 0: a relative drop is undefined")
  drop = float((reference - hits.mean()) / reference)
  recalls = resampled_recalls(np.stack([reference_hits, hits]), user_ids, resamples,
                              seed)
  recalls = recalls[recalls[:, 0] > 0]  # Draws of users the reference never hits.
  drops = (recalls[:, 0] - recalls[:, 1]) / recalls[:, 0]
  return drop, float(np.std(drops, ddof=1))
