"""Recall@k and mean rank against a brute-force reference, ties included."""

import numpy as np
import pytest

from fed_retrieval.evaluation import recall_metrics


def brute_force_rank(true_item, row, candidates):
  """Other candidates scoring at least as high as the true item."""
  return sum(1 for c in set(candidates) if c != true_item and row[c] >= row[true_item])


def reference(labels, scores, candidates_of):
  return np.array([brute_force_rank(y, scores[i], candidates_of(labels))
                   for i, y in enumerate(labels)])


def random_case(seed):
  rng = np.random.default_rng(seed)
  scores = np.round(rng.normal(size=(12, 30)), 1).astype(np.float32)  # Many ties.
  scores[:, 0] = -1e9
  labels = rng.integers(1, 30, 12).astype(np.int32)
  labels[3] = labels[5]  # A repeated positive in the batch.
  return labels, scores


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranks_match_brute_force(seed):
  labels, scores = random_case(seed)
  np.testing.assert_array_equal(
      recall_metrics.global_ranks(labels, scores).numpy(),
      reference(labels, scores, lambda _: range(1, 30)))
  np.testing.assert_array_equal(
      recall_metrics.batch_ranks(labels, scores).numpy(),
      reference(labels, scores, lambda batch: batch))


def test_ties_do_not_count_as_hits():
  scores = np.array([[-1e9, 0.5, 0.5, 0.1]], np.float32)
  metric = recall_metrics.RecallAtK(1)
  metric.update_state(np.array([1]), scores)
  assert metric.result().numpy() == 0.0
  metric = recall_metrics.RecallAtK(2)
  metric.update_state(np.array([1]), scores)
  assert metric.result().numpy() == 1.0


def test_padding_is_never_a_candidate():
  scores = np.array([[5.0, 0.2, 0.1]], np.float32)  # Even if padding scored high.
  assert recall_metrics.global_ranks(np.array([1]), scores).numpy().tolist() == [0]


def test_keras_metrics_accumulate_over_batches():
  metrics = recall_metrics.retrieval_metrics((1, 5))
  all_labels, all_scores = [], []
  for seed in range(3):
    labels, scores = random_case(seed)
    all_labels.append(labels)
    all_scores.append(scores)
    for metric in metrics:
      metric.update_state(labels, scores)
  results = {recall_metrics.report_name(m.name): m.result().numpy() for m in metrics}
  global_ranks = np.concatenate([reference(l, s, lambda _: range(1, 30))
                                 for l, s in zip(all_labels, all_scores)])
  batch_ranks = np.concatenate([reference(l, s, lambda b: b)
                                for l, s in zip(all_labels, all_scores)])
  for k in (1, 5):
    assert results[f"global_recall@{k}"] == pytest.approx(np.mean(global_ranks < k))
    assert results[f"batch_recall@{k}"] == pytest.approx(np.mean(batch_ranks < k))
  assert results["global_mean_rank"] == pytest.approx(np.mean(global_ranks + 1))


def test_metrics_rebuild_from_config():
  metric = recall_metrics.RecallAtK(5, "batch")
  rebuilt = recall_metrics.RecallAtK.from_config(metric.get_config())
  assert (rebuilt.k, rebuilt.candidates, rebuilt.name) == (5, "batch", "batch_recall_at_5")
  rank = recall_metrics.MeanRank.from_config(recall_metrics.MeanRank().get_config())
  assert rank.name == "global_mean_rank"


@pytest.mark.parametrize("group_size", [1, 4, 5, 12])
def test_grouped_batch_ranks_equal_per_batch_ranks(group_size):
  labels, scores = random_case(7)
  expected = np.concatenate([
      recall_metrics.batch_ranks(labels[i:i + group_size],
                                 scores[i:i + group_size]).numpy()
      for i in range(0, len(labels), group_size)])
  np.testing.assert_array_equal(
      recall_metrics.grouped_batch_ranks(labels, scores, group_size).numpy(), expected)
