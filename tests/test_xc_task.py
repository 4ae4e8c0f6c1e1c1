"""Label partitions, the synthetic XC generator and the XC task."""

import dataclasses
import os

import numpy as np
import pytest
import scipy.sparse
import tensorflow as tf

from fed_retrieval.evaluation import classification_metrics
from fed_retrieval.models import xc_encoder
from tasks.xc import family as xc_family
from tasks.xc import partitions
from tasks.xc import synthetic_xc
from tasks.xc import xc_task
from tasks.xc.settings import XCSettings

LABELS = np.array([3, 1, 3, 0, 1, 1, 2, 3, 0, 2, 2, 2])


def covers_every_point_once(parts, n):
  points = np.concatenate(list(parts.values()))
  return sorted(points.tolist()) == list(range(n))


def test_one_label_per_client_holds_exactly_that_labels_points():
  parts = partitions.partition_points(LABELS, "one_label_per_client", seed=0)
  assert sorted(parts) == [0, 1, 2, 3]
  for label, points in parts.items():
    np.testing.assert_array_equal(points, np.flatnonzero(LABELS == label))


def test_k_labels_per_client_deals_k_labels_seeded():
  parts = partitions.partition_points(LABELS, "k_labels_per_client", seed=4,
                                      labels_per_client=2)
  assert len(parts) == 2 and covers_every_point_once(parts, len(LABELS))
  assert all(len(np.unique(LABELS[p])) == 2 for p in parts.values())
  again = partitions.partition_points(LABELS, "k_labels_per_client", seed=4,
                                      labels_per_client=2)
  assert all(np.array_equal(parts[c], again[c]) for c in parts)


def test_dirichlet_skews_labels_and_is_seeded():
  labels = np.repeat(np.arange(20), 50)
  skewed = partitions.partition_points(labels, "dirichlet", 0, num_clients=10, alpha=0.05)
  flat = partitions.partition_points(labels, "dirichlet", 0, num_clients=10, alpha=100.0)
  assert covers_every_point_once(skewed, len(labels))
  dominant = lambda parts: np.mean([np.bincount(labels[p]).max() / len(p)
                                    for p in parts.values()])
  assert dominant(skewed) > 2 * dominant(flat)
  again = partitions.partition_points(labels, "dirichlet", 0, num_clients=10, alpha=0.05)
  assert all(np.array_equal(skewed[c], again[c]) for c in skewed)


def test_co_occurring_labels_groups_the_labels_that_share_points():
  # Labels 0-2 share points, as do 3-5; label 6 is on every point but never
  # the drawn one.
  label_sets = ([np.array([0, 1, 6]), np.array([1, 2, 6]), np.array([2, 0, 6])] * 3 +
                [np.array([3, 4, 6]), np.array([4, 5, 6]), np.array([5, 3, 6])] * 2 +
                [np.array([7, 6])])
  drawn = np.array([s[0] for s in label_sets])  # 0, 1, 2, .., 3, 4, 5, .., 7
  groups = partitions.co_occurring_groups(np.unique(drawn), label_sets, 3)
  assert groups == {0: 0, 1: 0, 2: 0, 3: 1, 4: 1, 5: 1, 7: 2}  # 6 is never drawn.
  # By hand: 0, 1 and 2 are on 6 points each (the lowest id, 0, opens); 1 and
  # 2 share 3 of 0's points (Jaccard 3/9 each; the lower id first), 3-5 none.
  parts = partitions.partition_points(drawn, "co_occurring_labels", seed=0,
                                      labels_per_client=3, label_sets=label_sets)
  assert covers_every_point_once(parts, len(drawn))
  assert [sorted(set(drawn[p].tolist())) for p in parts.values()] == [[0, 1, 2],
                                                                      [3, 4, 5], [7]]
  with pytest.raises(ValueError, match="label sets"):
    partitions.partition_points(drawn, "co_occurring_labels", seed=0)


def test_co_occurring_groups_are_purer_than_random_ones_on_clustered_labels():
  rng = np.random.default_rng(0)
  topic = np.repeat(np.arange(20), 5)  # 100 labels in 20 topics of 5.
  label_sets = [rng.choice(np.flatnonzero(topic == rng.integers(20)), 3, replace=False)
                for _ in range(2000)]
  drawn = np.array([s[0] for s in label_sets])
  groups = partitions.co_occurring_groups(np.unique(drawn), label_sets, 5)
  by_group = {}
  for label, group in groups.items():
    by_group.setdefault(group, []).append(topic[label])
  purity = np.mean([np.bincount(t).max() / len(t) for t in by_group.values()])
  assert sorted(groups) == sorted(np.unique(drawn).tolist()) and purity > 0.95
  assert max(len(t) for t in by_group.values()) == 5


def test_confusable_labels_look_alike_and_never_share_a_point():
  # Labels 0 and 1 label points of the same features (0's also carry 2);
  # 3 and 4 another feature; 2 looks like 0 most of all but shares its points.
  label_sets = [np.array([0, 2])] * 4 + [np.array([1])] * 3 + [np.array([3])] * 2 + [
      np.array([4])] * 2
  features = scipy.sparse.csr_matrix(np.array(
      [[1.0, 0.1, 0.0]] * 4 + [[1.0, 0.0, 0.0]] * 3 + [[0.0, 0.0, 1.0]] * 2 +
      [[0.0, 0.2, 1.0]] * 2))
  drawn = np.array([0, 2, 0, 2, 1, 1, 1, 3, 3, 4, 4])
  groups = partitions.confusable_groups(np.unique(drawn), label_sets, features, 2)
  # 0 (on 4 points) opens and takes 1 (cosine ~1; 2 is barred); then 2 opens
  # (4 points) and takes the nearer of 3 and 4 (4: the 0.1-0.2 feature).
  assert groups == {0: 0, 1: 0, 2: 1, 4: 1, 3: 2}
  parts = partitions.partition_points(drawn, "confusable_labels", seed=0,
                                      labels_per_client=2, label_sets=label_sets,
                                      features=features)
  assert covers_every_point_once(parts, len(drawn))
  with pytest.raises(ValueError, match="label sets and features"):
    partitions.partition_points(drawn, "confusable_labels", seed=0,
                                label_sets=label_sets)


@pytest.mark.parametrize("kwargs, message", [
    (dict(partition="by_magic"), "--partition must be one of"),
    (dict(partition="dirichlet"), "--num_clients must be >= 1"),
    (dict(partition="dirichlet", num_clients=3, alpha=0.0), "--dirichlet_alpha"),
    (dict(partition="k_labels_per_client", labels_per_client=0), "--labels_per_client"),
])
def test_bad_partition_settings_name_the_flag(kwargs, message):
  with pytest.raises(ValueError, match=message):
    partitions.partition_points(LABELS, seed=0, **kwargs)


def test_synthetic_xc_is_deterministic_multilabel_and_confusable():
  config = synthetic_xc.PRESETS["xc_tiny"]
  train, test = synthetic_xc.generate(config)
  again, _ = synthetic_xc.generate(config)
  assert (train.features != again.features).nnz == 0
  assert train.num_points == config.num_train and test.num_points == config.num_test
  assert np.bincount(np.concatenate(train.labels), minlength=config.num_labels).min() >= (
      config.min_points_per_label)
  assert 1.5 < np.mean([len(s) for s in train.labels]) < 4
  np.testing.assert_allclose(scipy.sparse.linalg.norm(train.features, axis=1), 1.0,
                             rtol=1e-5)


def test_chunked_generation_is_deterministic_and_keeps_every_point(monkeypatch):
  config = synthetic_xc.PRESETS["xc_tiny"]
  monkeypatch.setattr(synthetic_xc, "POINTS_PER_CHUNK", 1_000)  # 3 chunks of train.
  train, test = synthetic_xc.generate(config)
  again, _ = synthetic_xc.generate(config)
  assert (train.features != again.features).nnz == 0
  assert train.num_points == config.num_train and test.num_points == config.num_test
  assert len(train.labels) == config.num_train and all(len(s) for s in train.labels)
  np.testing.assert_allclose(scipy.sparse.linalg.norm(train.features, axis=1), 1.0,
                             rtol=1e-5)


def test_paper_shaped_presets_have_table_2s_counts():
  # Paper 000, Table 2: labels, features, train and test points.
  for name, shape in [("xc_amazoncat13k", (13_330, 203_882, 1_186_239, 306_782)),
                      ("xc_amazon670k", (670_091, 135_909, 490_449, 153_025))]:
    config = synthetic_xc.PRESETS[name]
    assert (config.num_labels, config.num_features, config.num_train,
            config.num_test) == shape


def test_pad_features_keeps_the_largest_values_and_pads_with_zero():
  features = scipy.sparse.csr_matrix(np.array([[0.1, 0.0, 0.7, 0.3], [0.0, 0.5, 0.0, 0.0]]))
  ids, values = xc_task.pad_features(features, 2)
  np.testing.assert_array_equal(ids, [[3, 4], [2, 0]])  # Feature id + 1.
  np.testing.assert_allclose(values, [[0.7, 0.3], [0.5, 0.0]])


def test_xc_task_one_label_per_client_and_evaluation_keeps_all_labels():
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(synthetic="xc_tiny",
                                                    label_assignment="sample"))
  assert len(task.clients.client_ids) == task.num_labels
  assert task.max_labels_per_client() == 1
  assert len(task.example_labels) == len(task.train)  # One example a point.
  for client in task.clients.client_ids[:20]:
    assert set(task.example_labels[task.clients.points(client)]) == {int(client)}
  # Each training label is one of the point's true labels.
  assert all(l in task.train.label_sets[p]
             for p, l in zip(task.example_points, task.example_labels))
  assert len(task.validation) + len(task.test) == synthetic_xc.PRESETS["xc_tiny"].num_test
  assert np.mean([len(s) for s in task.test.label_sets]) > 1.5


def write_small_xc_files(directory, train_lines, test_lines, num_features=6,
                         num_labels=3):
  paths = []
  for name, lines in (("train.txt", train_lines), ("test.txt", test_lines)):
    paths.append(os.path.join(directory, name))
    with open(paths[-1], "w") as f:
      f.write(f"{len(lines)} {num_features} {num_labels}\n" + "\n".join(lines) + "\n")
  return paths


def test_all_labels_puts_a_point_on_the_client_of_every_label_it_carries(tmp_path):
  train, test = write_small_xc_files(
      tmp_path, ["0,2 0:1 1:1", "1 2:1", "0,1,2 3:1 4:1 5:1", "2 0:1"],
      ["0 1:1", "1 2:1", "2 3:1"])
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(
      train_path=train, test_path=test, label_assignment="all"))
  pairs = sorted(zip(task.example_points.tolist(), task.example_labels.tolist()))
  assert pairs == [(0, 0), (0, 2), (1, 1), (2, 0), (2, 1), (2, 2), (3, 2)]
  held = {int(c): sorted(task.example_points[task.clients.points(c)].tolist())
          for c in task.clients.client_ids}
  assert held == {0: [0, 2], 1: [1, 2], 2: [0, 2, 3]}  # Client c: every point with c.
  # The client's inputs are its points' features.
  inputs = task.clients.training_dataset("2", batch_size=8).get_single_element()[0]
  np.testing.assert_array_equal(inputs[0], task.train.feature_ids[[0, 2, 3]])
  # The other assignment, for a centralized reference: one drawn label a point.
  points, labels = task.training_examples("sample")
  np.testing.assert_array_equal(points, np.arange(4))
  assert all(l in task.train.label_sets[p] for p, l in zip(points, labels))


def test_features_are_padded_to_the_widest_point_and_raw_counts_scaled(tmp_path):
  train, test = write_small_xc_files(
      tmp_path, ["0 0:3 1:1 2:7", "1 2:2"], ["0 1:1", "1 2:1 3:1 4:1 5:1"])
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(train_path=train, test_path=test))
  assert task.feature_width == 4 and task.points_with_features_cut == 0
  assert task.feature_scaling == "log1p"  # Whole numbers, some above 1: counts.
  np.testing.assert_array_equal(task.train.feature_ids[0], [3, 1, 2, 0])  # Largest first.
  np.testing.assert_allclose(task.train.feature_values[0],
                             np.log1p([7, 3, 1, 0]), rtol=1e-6)
  capped = xc_task.build_xc_task(xc_task.XCTaskConfig(
      train_path=train, test_path=test, max_features=2, feature_scaling="none"))
  assert capped.feature_width == 2 and capped.points_with_features_cut == 2
  np.testing.assert_allclose(capped.train.feature_values[0], [7, 3])
  for values, scaling in (("0:1 1:1", "none"), ("0:0.25 1:0.5", "none")):
    os.makedirs(tmp_path / scaling / values, exist_ok=True)  # Binary, tf-idf: kept.
    kept = xc_task.build_xc_task(xc_task.XCTaskConfig(*write_small_xc_files(
        tmp_path / scaling / values, ["0 " + values, "1 2:1"], ["0 1:1", "1 2:1"])))
    assert kept.feature_scaling == scaling
    np.testing.assert_allclose(sorted(kept.train.feature_values[0]),
                               sorted(float(v.split(":")[1]) for v in values.split()))


def test_xc_classifier_round_trips_through_keras_config():
  config = xc_encoder.XCEncoderConfig(num_features=9, num_labels=6, bag_dim=4,
                                      hidden_dims=(5,), embedding_dim=3)
  model = xc_encoder.build_xc_classifier(config, seed=2)
  again = tf.keras.Model.from_config(model.get_config())
  again.set_weights(model.get_weights())
  ids = np.array([[1, 4, 0]], np.int32)
  values = np.array([[0.6, 0.4, 0.0]], np.float32)
  np.testing.assert_allclose(again((ids, values)), model((ids, values)), rtol=1e-6)
  assert [tuple(w.shape) for w in model.trainable_weights] == (
      config.weight_shapes() + [(6, 3)])


def test_disjoint_class_split_holds_validation_and_test_classes_out_of_training():
  config = xc_task.XCTaskConfig(synthetic="xc_tiny", class_split="disjoint",
                                label_assignment="sample",
                                held_out_class_fraction=0.4, validation_fraction=0.25)
  task = xc_task.build_xc_task(config)
  train = set(task.example_labels)
  validation = {s[0] for s in task.validation.label_sets}
  test = {s[0] for s in task.test.label_sets}
  assert not (train & validation or train & test or validation & test)
  held_out = len(validation | test)
  assert held_out == round(0.4 * (held_out + len(train)))
  assert len(validation) == round(0.25 * held_out)
  assert all(len(s) == 1 for s in task.test.label_sets)  # One label each: MAP@R.
  # Every pooled point lands in exactly one split.
  tiny = synthetic_xc.PRESETS["xc_tiny"]
  assert len(task.train) + len(task.validation) + len(task.test) == (
      tiny.num_train + tiny.num_test - task.dropped_unlabeled)
  again = xc_task.build_xc_task(config)
  np.testing.assert_array_equal(again.example_labels, task.example_labels)
  with pytest.raises(ValueError, match="--xc_class_split"):
    xc_task.XCTaskConfig(synthetic="xc_tiny", class_split="classes")
  with pytest.raises(ValueError, match="--xc_label_assignment=sample"):
    xc_task.XCTaskConfig(synthetic="xc_tiny", class_split="disjoint",
                         label_assignment="all")


def test_linear_tower_is_the_normalized_value_weighted_bag_mean():
  config = xc_encoder.XCEncoderConfig(num_features=5, num_labels=3, bag_dim=4,
                                      hidden_dims=(), embedding_dim=4,
                                      dense_layers=False)
  assert config.weight_shapes() == [(6, 4)]
  model = xc_encoder.build_xc_classifier(config, seed=1)
  bag = model.trainable_weights[0].numpy()
  ids = np.array([[2, 5, 0], [1, 0, 0]], np.int32)
  values = np.array([[0.3, 0.1, 0.9], [2.0, 0.0, 0.0]], np.float32)  # 0.9 pads.
  mean = np.stack([(0.3 * bag[2] + 0.1 * bag[5]) / 0.4, bag[1]])
  expected = mean / np.linalg.norm(mean, axis=1, keepdims=True)
  np.testing.assert_allclose(xc_encoder.instance_tower(model)((ids, values)), expected,
                             rtol=1e-5)
  with pytest.raises(ValueError, match="without dense layers"):
    xc_encoder.XCEncoderConfig(num_features=5, num_labels=3, bag_dim=4,
                               hidden_dims=(2,), embedding_dim=4, dense_layers=False)


def test_bag_rows_per_client_counts_each_clients_features_and_padding():
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(synthetic="xc_tiny"))
  rows = task.bag_rows_per_client()
  assert len(rows) == len(task.clients.client_ids)
  for i, client in enumerate(task.clients.client_ids[:5]):
    points = task.example_points[task.example_labels == int(client)]
    ids = task.train.feature_ids[points]
    assert rows[i] == len(set(ids[ids > 0].tolist())) + 1  # And row 0, padding.
  np.testing.assert_array_equal(task.labels_per_client(), 1)


def test_other_held_labels_are_the_points_labels_its_client_also_holds():
  label_sets = [np.array([0, 2]), np.array([1]), np.array([0, 1, 2]), np.array([2, 3])]
  points = np.array([0, 1, 2, 3])
  labels = np.array([0, 1, 2, 3])
  # Client a holds labels {0, 2} (points 0, 2), b {1, 3}, c {3} (no second label).
  clients = {"a": np.array([0, 2]), "b": np.array([1, 3])}
  others = xc_task.other_held_labels(label_sets, points, labels, clients)
  np.testing.assert_array_equal(others, [[2], [-1], [0], [-1]])
  # One label a client: nothing to leave out, no column.
  assert xc_task.other_held_labels(label_sets, points, labels, {
      str(i): np.array([i]) for i in range(4)}).shape == (4, 0)


def test_clients_of_several_labels_carry_their_points_other_held_labels(tmp_path):
  train, test = write_small_xc_files(
      tmp_path, ["0,2 0:1 1:1", "1 2:1", "0,1,2 3:1 4:1 5:1", "2 0:1"],
      ["0 1:1", "1 2:1", "2 3:1"])
  # One client holds every drawn label; points 0 and 2 carry two or three.
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(
      train_path=train, test_path=test, partition="k_labels_per_client",
      labels_per_client=3))
  labels = task.clients.labels
  assert labels.shape[0] == 4 and labels.shape[1] >= 2
  with_others = 0
  for row, (point, label) in enumerate(zip(task.example_points, task.example_labels)):
    client = next(c for c in task.clients.client_ids if row in task.clients.points(c))
    held = set(task.example_labels[task.clients.points(client)].tolist())
    expected = sorted(set(task.train.label_sets[point].tolist()) & held - {label})
    assert labels[row, 0] == label
    assert sorted(l for l in labels[row, 1:].tolist() if l >= 0) == expected
    with_others += bool(expected)
  assert task.summary()["examples_with_other_held_labels"] == with_others >= 1
  # One label per client (the default): labels as before, and the same fingerprint.
  one = xc_task.build_xc_task(xc_task.XCTaskConfig(train_path=train, test_path=test))
  assert one.clients.labels.ndim == 1
  assert one.summary()["examples_with_other_held_labels"] == 0
  assert xc_task.fingerprint(task) != xc_task.fingerprint(
      task, task.example_points, task.example_labels)


def test_a_multi_label_partitions_evaluation_reports_its_clients_class_cosine():
  config = xc_task.XCTaskConfig(synthetic="xc_tiny", partition="k_labels_per_client",
                                labels_per_client=3)
  task = xc_task.build_xc_task(config)
  groups = task.client_label_sets()
  for client, labels in zip(task.clients.client_ids, groups):
    np.testing.assert_array_equal(
        labels, sorted(set(task.example_labels[task.clients.points(client)])))
  assert max(len(g) for g in groups) == task.max_labels_per_client() == 3
  model = xc_encoder.build_xc_classifier(
      xc_encoder.XCEncoderConfig(task.num_features, task.num_labels), seed=0)
  metrics = xc_family.evaluation(task)(model, "validation")
  assert metrics["client_class_cosine"] == pytest.approx(
      classification_metrics.mean_cosine_within_groups(
          xc_encoder.class_table(model).numpy(), groups))
  columns = dict(xc_family.XCFamily().columns(XCSettings(task=config)))
  assert columns["client_class_cosine"] == "client class cosine"
  one_label = XCSettings(task=dataclasses.replace(config, partition="one_label_per_client"))
  assert "client_class_cosine" not in dict(xc_family.XCFamily().columns(one_label))
