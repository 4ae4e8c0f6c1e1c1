"""Per-user timelines -> next-item examples, and the splits used by the experiments.

An example is a sliding window over one user's timeline (sorted by timestamp,
ties kept in file order): the context holds the previous `max_context_length`
item ids, most recent first, padded with 0; the label is the next item id. A user
with n ratings yields n - 1 examples.
"""

import dataclasses
from typing import Optional, Sequence, Tuple

import numpy as np
import pandas as pd

PADDING_ID = 0  # Context slots without an item; item ids start at 1.


@dataclasses.dataclass(frozen=True)
class Examples:
  """Next-item examples, grouped by user in ascending `user_ids` order.

  `contexts[i]` are the items user `user_ids[i]` rated before `labels[i]`.
  """
  user_ids: np.ndarray  # int64 [N]
  contexts: np.ndarray  # int32 [N, max_context_length]
  labels: np.ndarray  # int32 [N]

  def __len__(self) -> int:
    return int(self.labels.shape[0])

  @property
  def num_users(self) -> int:
    return int(np.unique(self.user_ids).size)

  def take(self, index: np.ndarray) -> "Examples":
    return Examples(self.user_ids[index], self.contexts[index],
                    self.labels[index])

  def user_ranges(self) -> dict:
    """Maps each user id to the (start, stop) row range of its examples."""
    if len(self) and np.any(np.diff(self.user_ids) < 0):
      raise ValueError("examples are not grouped by ascending user id")
    users, starts = np.unique(self.user_ids, return_index=True)
    stops = np.append(starts[1:], len(self))
    return {int(u): (int(a), int(b)) for u, a, b in zip(users, starts, stops)}


def check_fractions(fractions: Sequence[float], flag_name: str) -> Tuple[float, ...]:
  """Validates split fractions: each in [0, 1] and summing to 1."""
  fractions = tuple(float(f) for f in fractions)
  if any(not 0.0 <= f <= 1.0 for f in fractions):
    raise ValueError(f"--{flag_name}: every fraction must lie in [0, 1], got "
                     f"{list(fractions)}")
  if abs(sum(fractions) - 1.0) > 1e-6:
    raise ValueError(f"--{flag_name}: fractions must add up to 1, got "
                     f"{list(fractions)} (sum {sum(fractions):g})")
  return fractions


def sliding_window_examples(ratings: pd.DataFrame,
                            max_context_length: int = 10,
                            min_timeline_length: int = 3,
                            max_examples_per_user: Optional[int] = None
                           ) -> Examples:
  """Turns a ratings log into next-item examples (see the module docstring).

  Users with fewer than `min_timeline_length` ratings are dropped. With
  `max_examples_per_user`, only each user's most recent examples are kept.
  """
  if max_context_length < 1:
    raise ValueError(f"--max_context_length must be >= 1, got {max_context_length}")
  if min_timeline_length < 2:
    raise ValueError(
        f"--min_timeline_length must be >= 2, got {min_timeline_length}")
  if max_examples_per_user is not None and max_examples_per_user < 1:
    raise ValueError(
        f"--max_examples_per_user must be >= 1, got {max_examples_per_user}")
  users = ratings["user_id"].to_numpy(np.int64)
  items = ratings["item_id"].to_numpy(np.int64)
  order = np.lexsort((ratings["timestamp"].to_numpy(), users))  # Stable: file order.
  users, items = users[order], items[order]

  _, starts, counts = np.unique(users, return_index=True, return_counts=True)
  keep_user = counts >= min_timeline_length
  keep_row = np.repeat(keep_user, counts)
  users, items = users[keep_row], items[keep_row]
  starts, counts = starts[keep_user], counts[keep_user]
  starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)

  position = np.arange(users.size) - np.repeat(starts, counts)
  is_label = position >= 1
  if max_examples_per_user is not None:
    examples_per_user = np.repeat(counts - 1, counts)
    is_label &= position > examples_per_user - max_examples_per_user
  label_rows = np.flatnonzero(is_label)
  label_positions = position[label_rows]

  contexts = np.full((label_rows.size, max_context_length), PADDING_ID, np.int32)
  for offset in range(1, max_context_length + 1):
    valid = label_positions >= offset
    contexts[valid, offset - 1] = items[label_rows[valid] - offset]
  return Examples(users[label_rows], contexts, items[label_rows].astype(np.int32))


def split_by_user(examples: Examples, fractions: Sequence[float], seed: int,
                  flag_name: str = "user_split") -> Tuple[Examples, ...]:
  """Splits users (not examples) by a seeded permutation: the federated split."""
  fractions = check_fractions(fractions, flag_name)
  users = np.unique(examples.user_ids)
  permuted = np.random.default_rng(seed).permutation(users)
  bounds = np.round(np.cumsum(fractions) * users.size).astype(int)
  parts = np.split(permuted, bounds[:-1])
  return tuple(examples.take(np.flatnonzero(np.isin(examples.user_ids, part)))
               for part in parts)


def split_by_example(examples: Examples, fractions: Sequence[float], seed: int,
                     flag_name: str = "example_split") -> Tuple[Examples, ...]:
  """Splits examples by a seeded shuffle across users: the centralized split.

  Each part keeps its examples grouped by user (stable sort), so the per-user
  view stays valid.
  """
  fractions = check_fractions(fractions, flag_name)
  permuted = np.random.default_rng(seed).permutation(len(examples))
  bounds = np.round(np.cumsum(fractions) * len(examples)).astype(int)
  return tuple(examples.take(np.sort(part)) for part in np.split(permuted, bounds[:-1]))


def shuffle_across_users(examples: Examples, seed: int) -> Examples:
  """The 'federated shuffled' IID control: examples are dealt out to users at
  random while every user keeps its example count."""
  permutation = np.random.default_rng(seed).permutation(len(examples))
  return Examples(examples.user_ids.copy(), examples.contexts[permutation],
                  examples.labels[permutation])
