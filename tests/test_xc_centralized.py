"""The XC centralized references and the comparison's gaps to them."""

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.training import centralized_loop
from fed_retrieval.training import validation_curve
from losses import multi_label
from tasks.xc import family as xc_family
from tasks.xc import xc_task
from tasks.xc.settings import REFERENCE_DEFAULTS
from tasks.xc.settings import XCSettings


@pytest.fixture(scope="module")
def tiny_task():
  return xc_task.build_xc_task(xc_task.XCTaskConfig(synthetic="xc_tiny"))


def train_reference(task, label_assignment, output_dir, **config):
  settings = XCSettings(task.config, centralized=dataclasses.replace(
      REFERENCE_DEFAULTS, **config))
  return centralized_loop.run_centralized(
      xc_family.centralized_job(task, settings, label_assignment), settings.centralized,
      output_dir)


def test_centralized_reference_learns_far_above_the_trivial_baseline(tiny_task, tmp_path):
  config = dict(epochs=3, patience=0, batch_size=64)
  results = train_reference(tiny_task, "all", str(tmp_path / "all"), **config)
  # All labels: one example a point, its labels the soft target.
  passes = math.ceil(len(tiny_task.train) / 64)
  assert results["algorithm"] == "centralized_all_labels"
  assert results["steps"] == results["best_step"] == 3 * passes  # Evaluated each pass.
  assert results["passes"] == pytest.approx(3 * passes * 64 / len(tiny_task.train))
  assert results["examples_seen"] == 3 * passes * 64
  baseline = xc_family.most_frequent_labels_baseline(tiny_task, (1, 3, 5))
  assert results["most_frequent_labels_baseline"] == baseline
  assert results["test"]["precision@1"] > baseline["precision@1"] + 0.5
  # Its standard error over the test points, from the units it saved.
  saved = validation_curve.read_test_units(str(tmp_path / "all"))
  assert saved.value == pytest.approx(results["test"]["precision@1"])
  assert results["test"]["precision@1_se"] == pytest.approx(
      np.std(saved.numerators, ddof=1) / np.sqrt(len(tiny_task.test)))
  # A finished run returns its results without training.
  again = train_reference(tiny_task, "all", str(tmp_path / "all"), **config)
  assert again == results


def test_one_label_reference_trains_on_one_example_a_point(tiny_task, tmp_path):
  results = train_reference(tiny_task, "sample", str(tmp_path / "one"), epochs=1,
                            patience=0)
  assert results["algorithm"] == "centralized_one_label"
  assert results["steps"] == math.ceil(len(tiny_task.train) / 64)


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
  metrics = xc_family.most_frequent_labels_baseline(task, (1, 2))
  assert metrics["precision@1"] == 1.0 and metrics["precision@2"] == 0.5


def test_soft_target_crossentropy_is_the_mean_over_a_points_labels():
  logits = tf.constant([[1.0, 2.0, 0.5], [0.0, 0.0, 3.0]])
  padded = multi_label.padded_label_sets([np.array([0, 1]), np.array([2])])
  np.testing.assert_array_equal(padded, [[0, 1], [2, multi_label.PAD]])
  log_p = tf.nn.log_softmax(logits).numpy()
  expected = [-(log_p[0, 0] + log_p[0, 1]) / 2, -log_p[1, 2]]
  loss = multi_label.SoftTargetCrossentropy(reduction="none")
  np.testing.assert_allclose(loss(padded, logits).numpy(), expected, rtol=1e-6)
  assert multi_label.SoftTargetCrossentropy.from_config(loss.get_config()).reduction == "none"


@pytest.mark.parametrize("changes, expected", [
    ({}, ["centralized_one_label", "centralized_all_labels",
          "centralized_all_labels_residual"]),
    # The federated runs' tower is the residual one: no second row of it.
    ({"architecture": "residual"}, ["centralized_one_label", "centralized_all_labels"]),
    ({"reference_architectures": ("small", "residual")},
     ["centralized_one_label", "centralized_all_labels", "centralized_all_labels_small",
      "centralized_all_labels_residual"]),
    ({"references": False}, []),
])
def test_a_comparison_adds_the_all_labels_reference_of_each_other_tower(changes, expected):
  settings = dataclasses.replace(XCSettings(xc_task.XCTaskConfig(synthetic="xc_tiny")),
                                 **changes)
  [group] = xc_family.XCFamily().comparison(settings)
  assert [run.name for run in group.centralized] == expected


def test_the_pooled_clients_loss_reads_each_examples_own_label():
  """The throughput benchmark's central contrast trains on the clients'
  pooled examples: with other held labels beside each label, its loss is the
  cross-entropy of the first column alone."""
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(
      synthetic="xc_tiny", partition="k_labels_per_client", labels_per_client=4))
  labels = task.clients.labels
  assert labels.ndim == 2 and (labels[:, 1:] >= 0).any()
  settings = XCSettings(task.config, algorithm="fedss")
  loss = xc_family.federated_job(task, settings, "fedss").central.loss
  logits = tf.random.stateless_normal([len(labels), task.num_labels], seed=[1, 2])
  expected = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
      labels[:, 0], logits)
  np.testing.assert_allclose(loss(tf.constant(labels), logits).numpy(), expected.numpy(),
                             rtol=1e-6)
