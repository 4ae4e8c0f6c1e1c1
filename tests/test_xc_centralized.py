"""The XC centralized references and the comparison's gaps to them."""

import math

import pytest

from fed_retrieval.reports import xc_comparison
from fed_retrieval.training import xc_training
from tasks.xc import xc_task


@pytest.fixture(scope="module")
def tiny_task():
  return xc_task.build_xc_task(xc_task.XCTaskConfig(synthetic="xc_tiny"))


def test_centralized_reference_learns_far_above_the_trivial_baseline(tiny_task, tmp_path):
  config = xc_training.XCCentralizedConfig(label_assignment="all", epochs=3, patience=0)
  results = xc_training.train_xc_centralized(
      tiny_task, xc_training.XCFederatedConfig(), config, str(tmp_path / "all"))
  passes = math.ceil(len(tiny_task.training_examples("all")[1]) / config.batch_size)
  assert results["algorithm"] == "centralized_all_labels"
  assert results["steps"] == results["best_step"] == 3 * passes  # Evaluated each pass.
  assert results["examples_seen"] == 3 * passes * config.batch_size
  baseline = xc_training.most_frequent_labels_baseline(tiny_task, (1, 3, 5))
  assert results["most_frequent_labels_baseline"] == baseline
  assert results["test"]["precision@1"] > baseline["precision@1"] + 0.5
  # A finished run returns its results without training.
  again = xc_training.train_xc_centralized(
      tiny_task, xc_training.XCFederatedConfig(), config, str(tmp_path / "all"))
  assert again == results


def test_one_label_reference_trains_on_one_example_a_point(tiny_task, tmp_path):
  config = xc_training.XCCentralizedConfig(label_assignment="sample", epochs=1,
                                           patience=0)
  results = xc_training.train_xc_centralized(
      tiny_task, xc_training.XCFederatedConfig(), config, str(tmp_path / "one"))
  assert results["algorithm"] == "centralized_one_label"
  assert results["steps"] == math.ceil(len(tiny_task.train) / config.batch_size)


def test_most_frequent_labels_counts_every_training_label(tmp_path):
  # All labels: 1 four times, 0 three times, 2 twice. Counting one drawn label
  # a point, 1 would reach 4 only if both "1,2" points drew it.
  train = ["0 0:1", "0 0:1", "0 0:1", "1,2 1:1", "1,2 1:1", "1 2:1", "1 2:1"]
  paths = []
  for name, lines in (("train.txt", train), ("test.txt", ["1 0:1", "1 1:1"])):
    paths.append(str(tmp_path / name))
    with open(paths[-1], "w") as f:
      f.write(f"{len(lines)} 3 3\n" + "\n".join(lines) + "\n")
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(*paths, label_assignment="sample"))
  metrics = xc_training.most_frequent_labels_baseline(task, (1, 2))
  assert metrics["precision@1"] == 1.0 and metrics["precision@2"] == 0.5


def test_gaps_are_p_at_1_points_to_the_same_label_and_the_best_reference():
  rows = [{"algorithm": "centralized_one_label", "precision@1": 0.55},
          {"algorithm": "centralized_all_labels", "precision@1": 0.62},
          {"algorithm": "fedaws", "precision@1": 0.50},
          {"algorithm": "most_frequent_labels", "precision@1": 0.14}]
  xc_comparison.with_gaps(rows, "centralized_one_label")
  assert rows[2]["p@1_gap_to_centralized_same_labels"] == pytest.approx(-0.05)
  assert rows[2]["p@1_gap_to_best_centralized"] == pytest.approx(-0.12)
  assert "p@1_gap_to_best_centralized" not in rows[0] | rows[3]
  table = xc_comparison.markdown_table(rows)
  assert "| fedaws | 50.00 |  |  | -5.00 | -12.00 |" in table
  assert "MAP@R" not in table
  rows[2].update(examples_seen=8000, rounds=40, best_round=30, worker_restarts=2)
  assert "| 8.0k ex, 40 rounds (best 30) (2 worker restarts) |" in (
      xc_comparison.markdown_table(rows))
