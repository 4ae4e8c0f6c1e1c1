"""The XC centralized references and the comparison's gaps to them."""

import math
import os

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.evaluation import units
from fed_retrieval.reports import xc_comparison
from fed_retrieval.training import validation_curve
from fed_retrieval.training import xc_training
from losses import multi_label
from tasks.xc import xc_task


@pytest.fixture(scope="module")
def tiny_task():
  return xc_task.build_xc_task(xc_task.XCTaskConfig(synthetic="xc_tiny"))


def test_centralized_reference_learns_far_above_the_trivial_baseline(tiny_task, tmp_path):
  config = xc_training.XCCentralizedConfig(label_assignment="all", epochs=3, patience=0)
  results = xc_training.train_xc_centralized(
      tiny_task, xc_training.XCFederatedConfig(), config, str(tmp_path / "all"))
  # All labels: one example a point, its labels the soft target.
  passes = math.ceil(len(tiny_task.train) / config.batch_size)
  assert results["algorithm"] == "centralized_all_labels"
  assert results["steps"] == results["best_step"] == 3 * passes  # Evaluated each pass.
  assert results["passes"] == pytest.approx(3 * passes * config.batch_size /
                                            len(tiny_task.train))
  assert results["examples_seen"] == 3 * passes * config.batch_size
  baseline = xc_training.most_frequent_labels_baseline(tiny_task, (1, 3, 5))
  assert results["most_frequent_labels_baseline"] == baseline
  assert results["test"]["precision@1"] > baseline["precision@1"] + 0.5
  # Its standard error over the test points, from the units it saved.
  saved = validation_curve.read_test_units(str(tmp_path / "all"))
  assert saved.value == pytest.approx(results["test"]["precision@1"])
  assert results["test"]["precision@1_se"] == pytest.approx(
      np.std(saved.numerators, ddof=1) / np.sqrt(len(tiny_task.test)))
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
  rows[2].update(examples_seen=8000, rounds=40, best_round=30, passes=25.2,
                 best_passes=18.9, worker_restarts=2)
  assert "| 25.2 passes (best 18.9), 40 rounds, 8.0k ex (2 worker restarts) |" in (
      xc_comparison.markdown_table(rows))


def test_gaps_carry_standard_errors_paired_over_the_test_points(tmp_path):
  """A federated run that hits points 0-5 of 10 against a reference that hits
  points 2-9: the gap -0.2 has the standard error of the per-point differences."""
  hits = {"centralized_one_label": np.arange(10) >= 2, "fedaws": np.arange(10) < 6}
  rows = []
  for name, hit in hits.items():
    os.makedirs(tmp_path / name)
    validation_curve.test_metrics({"precision@1": hit.mean(),
                                   units.UNITS: units.per_point(hit)},
                                  "precision@1", str(tmp_path / name))
    rows.append({"algorithm": name, "precision@1": hit.mean(),
                 "run_dir": str(tmp_path / name)})
  xc_comparison.with_gaps(rows, "centralized_one_label")
  difference = hits["fedaws"].astype(float) - hits["centralized_one_label"]
  assert rows[1]["p@1_gap_to_centralized_same_labels"] == pytest.approx(-0.2)
  assert rows[1]["p@1_gap_to_centralized_same_labels_se"] == pytest.approx(
      np.std(difference, ddof=1) / np.sqrt(10))
  assert "| fedaws | 60.00 |  |  | -20.00 ± 24.94 | -20.00 ± 24.94 |" in (
      xc_comparison.markdown_table(rows))


def test_soft_target_crossentropy_is_the_mean_over_a_points_labels():
  logits = tf.constant([[1.0, 2.0, 0.5], [0.0, 0.0, 3.0]])
  padded = multi_label.padded_label_sets([np.array([0, 1]), np.array([2])])
  np.testing.assert_array_equal(padded, [[0, 1], [2, multi_label.PAD]])
  log_p = tf.nn.log_softmax(logits).numpy()
  expected = [-(log_p[0, 0] + log_p[0, 1]) / 2, -log_p[1, 2]]
  loss = multi_label.SoftTargetCrossentropy(reduction="none")
  np.testing.assert_allclose(loss(padded, logits).numpy(), expected, rtol=1e-6)
  assert multi_label.SoftTargetCrossentropy.from_config(loss.get_config()).reduction == "none"
