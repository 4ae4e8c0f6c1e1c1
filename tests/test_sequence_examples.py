"""Sliding windows on hand-made timelines, splits and the IID control."""

import numpy as np
import pandas as pd
import pytest

from tasks.movielens import sequence_examples as se


def ratings(rows):
  return pd.DataFrame(rows, columns=["user_id", "item_id", "rating", "timestamp"])


# User 7 rated items 11..15 (given out of order, with a timestamp tie that must
# keep file order: 13 before 14); user 8 has two ratings; user 9 one.
TIMELINES = ratings([
    (7, 12, 4, 200), (7, 11, 5, 100), (8, 21, 3, 5), (7, 13, 1, 300),
    (7, 14, 2, 300), (9, 31, 5, 1), (7, 15, 3, 400), (8, 22, 3, 6),
])


def test_exact_windows_most_recent_first_padded():
  examples = se.sliding_window_examples(TIMELINES, max_context_length=3,
                                        min_timeline_length=2)
  np.testing.assert_array_equal(examples.user_ids, [7, 7, 7, 7, 8])
  np.testing.assert_array_equal(examples.labels, [12, 13, 14, 15, 22])
  np.testing.assert_array_equal(examples.contexts, [
      [11, 0, 0],
      [12, 11, 0],
      [13, 12, 11],
      [14, 13, 12],
      [21, 0, 0],
  ])
  assert examples.contexts.dtype == np.int32


def test_min_timeline_length_drops_short_users():
  examples = se.sliding_window_examples(TIMELINES, min_timeline_length=3)
  assert set(examples.user_ids) == {7}
  assert len(examples) == 4  # n ratings -> n - 1 examples.


def test_max_examples_per_user_keeps_the_most_recent():
  examples = se.sliding_window_examples(TIMELINES, max_context_length=2,
                                        min_timeline_length=2,
                                        max_examples_per_user=2)
  np.testing.assert_array_equal(examples.labels, [14, 15, 22])
  np.testing.assert_array_equal(examples.contexts, [[13, 12], [14, 13], [21, 0]])


@pytest.mark.parametrize("kwargs,flag", [
    ({"max_context_length": 0}, "--max_context_length"),
    ({"min_timeline_length": 1}, "--min_timeline_length"),
    ({"max_examples_per_user": 0}, "--max_examples_per_user"),
])
def test_bad_window_settings_name_the_flag(kwargs, flag):
  with pytest.raises(ValueError, match=flag):
    se.sliding_window_examples(TIMELINES, **kwargs)


def random_examples(num_users=200, seed=0):
  rng = np.random.default_rng(seed)
  rows = [(u, int(rng.integers(1, 50)), 3, t)
          for u in range(1, num_users + 1) for t in range(int(rng.integers(3, 12)))]
  return se.sliding_window_examples(ratings(rows))


def test_user_split_sizes_and_disjointness():
  examples = random_examples()
  train, val, test = se.split_by_user(examples, (0.8, 0.1, 0.1), seed=3)
  users = [set(part.user_ids) for part in (train, val, test)]
  assert [len(u) for u in users] == [160, 20, 20]
  assert not users[0] & users[1] and not users[0] & users[2] and not users[1] & users[2]
  assert len(train) + len(val) + len(test) == len(examples)
  again = se.split_by_user(examples, (0.8, 0.1, 0.1), seed=3)
  np.testing.assert_array_equal(again[0].labels, train.labels)


def test_example_split_sizes_disjoint_and_grouped():
  examples = random_examples()
  train, test = se.split_by_example(examples, (0.9, 0.1), seed=1)
  assert len(test) == round(0.1 * len(examples))
  assert len(train) + len(test) == len(examples)
  keys = lambda e: {tuple(c) + (u, l) for u, c, l in zip(e.user_ids, e.contexts, e.labels)}
  assert not keys(train) & keys(test)
  assert np.all(np.diff(train.user_ids) >= 0)  # Still grouped by user.
  assert train.num_users > 150  # Shuffled across users, not by user.


@pytest.mark.parametrize("fractions,message", [
    ((0.5, 0.5, 0.2), "add up to 1"),
    ((1.2, -0.2), "must lie in"),
])
def test_bad_fractions_name_the_flag(fractions, message):
  with pytest.raises(ValueError, match=f"--user_split: .*{message}"):
    se.split_by_user(random_examples(), fractions, seed=0)


def test_shuffle_across_users_keeps_counts_and_examples():
  examples = random_examples()
  shuffled = se.shuffle_across_users(examples, seed=5)
  np.testing.assert_array_equal(shuffled.user_ids, examples.user_ids)
  assert {u: b - a for u, (a, b) in shuffled.user_ranges().items()} == {
      u: b - a for u, (a, b) in examples.user_ranges().items()}
  pairs = lambda e: sorted(tuple(c) + (l,) for c, l in zip(e.contexts, e.labels))
  assert pairs(shuffled) == pairs(examples)
  moved = np.mean(shuffled.labels != examples.labels)
  assert moved > 0.8
