"""MAP@R of retrieval among evaluation points, against a direct computation;
the class table's cosines (overall and within each client's classes) against
pairwise ones; P@k of a classifier through an approximate index, within the
index's recall."""

import dataclasses

import numpy as np
import pytest

from fed_retrieval.evaluation import classification_metrics
from fed_retrieval.models import scoring
from fed_retrieval.models import xc_encoder
from tasks.xc.xc_task import PaddedPoints


def direct_map_at_r(embeddings, labels):
  unit = embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True)
  scores, values, first_hits = unit @ unit.T, [], []
  for i, label in enumerate(labels):
    r = int(np.sum(labels == label)) - 1
    if r == 0:
      continue
    order = [j for j in np.argsort(-scores[i], kind="stable") if j != i][:r]
    relevant = labels[order] == label
    values.append(sum(relevant[:k + 1].mean() for k in range(r) if relevant[k]) / r)
    first_hits.append(relevant[0])
  return np.mean(values), np.mean(first_hits)


def test_map_at_r_by_hand():
  # Class 0: points 0, 1, 2; class 1: points 3, 4; class 2: point 5 alone (skipped).
  embeddings = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9], [0.95, 0.05],
                         [-1, 0]], np.float32)
  labels = np.array([0, 0, 0, 1, 1, 2])
  got = classification_metrics.map_at_r(
      embeddings / np.linalg.norm(embeddings, axis=1, keepdims=True), labels)
  # Point 0: neighbours 4 (no), 1 (yes): R=2 -> (0 + 1/2) / 2 = 0.25.
  # Point 1: 4 (no), 0 (yes) -> 0.25. Point 2: 3 (no), 1 (yes) -> 0.25.
  # Point 3: R=1, nearest 2 (no) -> 0. Point 4: nearest 0 (no) -> 0.
  assert got["map@r"] == pytest.approx(0.75 / 5)
  assert got["recall@1"] == pytest.approx(0.0)


def test_map_at_r_matches_a_direct_computation():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 8, size=60)
  centers = 3 * rng.normal(size=(8, 6))
  embeddings = centers[labels] + rng.normal(size=(60, 6))
  embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
  got = classification_metrics.map_at_r(embeddings.astype(np.float32), labels)
  expected_map, expected_recall = direct_map_at_r(embeddings, labels)
  assert got["map@r"] == pytest.approx(expected_map, abs=1e-6)
  assert got["recall@1"] == pytest.approx(expected_recall, abs=1e-6)
  assert 0.3 < got["map@r"] < 1  # Clustered: far above chance (~1/8).


def test_mean_pairwise_cosine_is_the_mean_over_distinct_pairs():
  table = np.random.default_rng(0).normal(size=(7, 5)) * np.arange(1, 8)[:, None]
  unit = table / np.linalg.norm(table, axis=1, keepdims=True)
  pairs = (unit @ unit.T)[np.triu_indices(7, 1)]
  assert classification_metrics.mean_pairwise_cosine(table) == pytest.approx(pairs.mean())
  collapsed = np.tile([[3.0, 4.0]], (5, 1)) * np.arange(1, 6)[:, None]
  assert classification_metrics.mean_pairwise_cosine(collapsed) == pytest.approx(1.0)
  assert classification_metrics.mean_pairwise_cosine(np.eye(4)) == pytest.approx(0.0)
  assert classification_metrics.mean_pairwise_cosine(
      np.array([[1.0, 0.0], [-1.0, 0.0]])) == pytest.approx(-1.0)


def test_client_class_cosine_is_the_mean_over_clients_of_their_pairs():
  table = np.random.default_rng(1).normal(size=(9, 4)) * np.arange(1, 10)[:, None]
  unit = table / np.linalg.norm(table, axis=1, keepdims=True)
  groups = [np.array([0, 3, 5]), np.array([7]), np.array([1, 2, 4, 8]), np.array([6, 0])]
  expected = np.mean([(unit[g] @ unit[g].T)[np.triu_indices(len(g), 1)].mean()
                      for g in groups if len(g) >= 2])  # The singleton has no pair.
  assert classification_metrics.mean_cosine_within_groups(table, groups) == (
      pytest.approx(expected))
  # Each client's classes on one direction, the clients' directions orthogonal:
  # collapsed within (1.0) while the whole table's mean cosine stays low.
  folded = np.repeat(np.eye(4), 3, axis=0) * np.arange(1, 13)[:, None]
  clients = [np.arange(3 * c, 3 * c + 3) for c in range(4)]
  assert classification_metrics.mean_cosine_within_groups(folded, clients) == (
      pytest.approx(1.0))
  assert classification_metrics.mean_pairwise_cosine(folded) == pytest.approx(
      4 * 3 * 2 / (12 * 11))
  assert classification_metrics.mean_cosine_within_groups(table, [np.array([1])]) is None


def test_p_at_k_through_an_approximate_index_is_within_its_recall():
  config = xc_encoder.XCEncoderConfig(num_features=60, num_labels=4000, bag_dim=16)
  model = xc_encoder.build_xc_classifier(config, seed=0)
  rng = np.random.default_rng(0)

  def points(n):
    ids = np.stack([rng.choice(np.arange(1, 61), 5, replace=False) for _ in range(n)])
    return PaddedPoints(ids.astype(np.int32), rng.uniform(0.1, 1, [n, 5]).astype(np.float32),
                        [np.zeros(0, np.int64)] * n)

  test, calibration = points(400), points(500)
  # Half the points are labelled with their model's exact top 3: P@k is far from 0.
  _, top = scoring.chunked_top_k(classification_metrics.instance_embeddings(model, test),
                                 scoring.l2_normalize(xc_encoder.class_table(model)), 3)
  test.label_sets[:] = [top.numpy()[i] if i % 2 else rng.choice(4000, 3, replace=False)
                        for i in range(len(test))]
  exact = classification_metrics.evaluate_classifier(model, test)  # auto: 4,000 rows.
  assert not any(key.startswith("index_") for key in exact)
  assert "client_class_cosine" not in exact  # No client groups given.
  grouped = classification_metrics.evaluate_classifier(
      model, test, class_groups=[np.array([3, 9]), np.array([5])])
  table = xc_encoder.class_table(model).numpy()
  assert grouped["client_class_cosine"] == pytest.approx(
      table[3] @ table[9] / np.linalg.norm(table[3]) / np.linalg.norm(table[9]))
  assert exact["precision@3"] > 0.45
  approximate = classification_metrics.evaluate_classifier(
      model, test, index="approximate", calibration_points=calibration)
  assert approximate["class_cosine"] == exact["class_cosine"]
  for k in (1, 3, 5):
    recall = approximate[f"index_recall@{k}"]
    assert 0.8 <= recall <= 1.0
    # A top-k list that shares a share r of the exact one changes P@k by <= 1 - r.
    assert abs(approximate[f"precision@{k}"] - exact[f"precision@{k}"]) <= 1 - recall + 1e-9
  with pytest.raises(ValueError, match="calibration points"):
    classification_metrics.evaluate_classifier(model, test, index="approximate")


def test_a_dot_product_classifier_is_scored_and_ranked_by_unnormalized_rows():
  """With `scoring="dot"` the logits are the raw tower output against the raw
  rows, and P@1 ranks by them: a class row of large norm wins the points a
  cosine ranking gives to a closer-pointing row."""
  config = xc_encoder.XCEncoderConfig(num_features=6, num_labels=3, bag_dim=2,
                                      hidden_dims=(), embedding_dim=2, scoring="dot")
  model = xc_encoder.build_xc_classifier(config, seed=0)
  bag, kernel, bias = (w.numpy() for w in model.get_layer("instance_tower").tower_weights)
  bag[1:] = [[1, 0], [1, 0.3], [0, 1], [1, 1], [2, 0], [0, 3]]
  model.get_layer("instance_tower").tower_weights[0].assign(bag)
  model.get_layer("instance_tower").tower_weights[1].assign(np.eye(2, dtype=np.float32))
  xc_encoder.class_table(model).assign([[1.0, 0.0], [0.0, 1.0], [3.0, 3.0]])
  ids = np.array([[1], [2], [3]], np.int32)  # Features 1-3: embeddings as rows 1-3.
  points = PaddedPoints(ids, np.ones([3, 1], np.float32),
                        [np.array([0]), np.array([2]), np.array([1])])
  logits = model((ids, np.ones([3, 1], np.float32))).numpy()
  embeddings = np.array([[1, 0], [1, 0.3], [0, 1]], np.float32)
  np.testing.assert_allclose(logits, embeddings @ xc_encoder.class_table(model).numpy().T,
                             rtol=1e-6)
  metrics = classification_metrics.evaluate_classifier(model, points, ks=(1,))
  # Dot products pick class 2 (norm 4.2) for every point: only point 1 is right.
  # Cosines would pick classes 0, 0 and 1: points 0 and 2 right.
  assert metrics["precision@1"] == pytest.approx(1 / 3)
  # Cosines asked for are the default, held as None: the same run config.
  assert dataclasses.replace(config, scoring="cosine") == dataclasses.replace(
      config, scoring=None)
  cosine = xc_encoder.build_xc_classifier(
      dataclasses.replace(config, scoring="cosine"), seed=0)
  cosine.set_weights(model.get_weights())
  assert classification_metrics.evaluate_classifier(
      cosine, points, ks=(1,))["precision@1"] == pytest.approx(2 / 3)
