"""Precision@k and recall@k of multi-label predictions, over all classes, and
MAP@R of retrieval among held-out points.

precision@k = |top-k classes of a point that are true labels| / k, averaged
over points (the XC repository's P@k); recall@k = the same count / the number of
true labels. The top-k come from a chunked search over the whole class table
(`scoring.chunked_top_k`), so no dense points x classes matrix is built.

MAP@R (Musgrave et al. 2020; paper 003's retrieval metric, eq. 9): each point
queries the other points of its split by instance-embedding cosine; with R
the number of other points of its class, MAP@R = (1/R) sum_{i<=R} P@i [the
i-th neighbour is of its class], averaged over points with R >= 1. Used when
the test classes are disjoint from the training classes (`class_split`).
"""

from typing import Any, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from fed_retrieval import top_k_index
from fed_retrieval.evaluation import units
from fed_retrieval.models import scoring
from fed_retrieval.models import xc_encoder
from tasks.xc.xc_task import PaddedPoints

DEFAULT_KS = (1, 3, 5)


def hits(top_ids: np.ndarray, label_sets: Sequence[np.ndarray]) -> np.ndarray:
  """[N, K] booleans: is the j-th predicted class of point i one of its labels."""
  top_ids = np.asarray(top_ids, np.int64)
  num_classes = int(max(top_ids.max(initial=0), max((s.max(initial=0) for s in label_sets),
                                                     default=0))) + 1
  true_codes = np.concatenate(
      [i * num_classes + np.asarray(s, np.int64) for i, s in enumerate(label_sets)] +
      [np.zeros(0, np.int64)])
  predicted = np.arange(len(top_ids))[:, None] * num_classes + top_ids
  return np.isin(predicted, true_codes)


def precision_recall_at_k(top_ids: np.ndarray, label_sets: Sequence[np.ndarray],
                          ks: Sequence[int] = DEFAULT_KS) -> Dict[str, Any]:
  """P@k and R@k, and (`units.UNITS`) P@min(k) per point."""
  found = hits(top_ids, label_sets)
  sizes = np.array([max(len(s), 1) for s in label_sets], np.float64)
  metrics = {}
  for k in ks:
    count = found[:, :k].sum(axis=1)
    metrics[f"precision@{k}"] = float(np.mean(count / k))
    metrics[f"recall@{k}"] = float(np.mean(count / sizes))
  metrics[units.UNITS] = units.per_point(found[:, :min(ks)].sum(axis=1) / min(ks))
  return metrics


def instance_embeddings(model: tf.keras.Model, points: PaddedPoints,
                        batch_size: int = 4096) -> np.ndarray:
  tower = model.get_layer("instance_tower")
  return np.concatenate([
      tower((points.feature_ids[i:i + batch_size],
             points.feature_values[i:i + batch_size])).numpy()
      for i in range(0, len(points), batch_size)])


def _unit_rows(table: np.ndarray) -> np.ndarray:
  table = np.asarray(table, np.float64)
  return table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-12)


def _mean_over_pairs(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
  """With unit rows u_i summed per group, the sum over i != j of u_i . u_j is
  |sum_i u_i|^2 - n: each group's mean pairwise cosine in O(n d)."""
  return (np.einsum("gd,gd->g", sums, sums) - counts) / (counts * (counts - 1))


def mean_pairwise_cosine(table: np.ndarray) -> float:
  """The mean cosine between two distinct rows of a class table: near 1 when
  the classes have collapsed onto one direction (paper 000's positive-only
  training pulls every class toward its clients' instances), near 0 or below
  when they are spread out. Exact in O(C d)."""
  count = len(table)
  if count < 2:
    raise ValueError(f"a mean pairwise cosine needs >= 2 classes, got {count}")
  return float(_mean_over_pairs(_unit_rows(table).sum(axis=0)[None],
                                np.array([count], np.float64))[0])


def mean_cosine_within_groups(table: np.ndarray, groups: Sequence[np.ndarray]
                              ) -> Optional[float]:
  """The mean, over the groups of >= 2 classes (each client's classes), of
  the mean cosine between two distinct classes of the group; None when no
  group has two. Paper 003's NegOnly collapse is local: a client's positives
  never push each other, so they can fold onto one direction while the
  table's `mean_pairwise_cosine` stays near 0. O(sum of group sizes x d)."""
  groups = [np.asarray(g, np.int64) for g in groups if len(g) >= 2]
  if not groups:
    return None
  sizes = np.array([len(g) for g in groups], np.float64)
  starts = np.concatenate([[0], np.cumsum(sizes[:-1])]).astype(np.int64)
  sums = np.add.reduceat(_unit_rows(table)[np.concatenate(groups)], starts, axis=0)
  return float(_mean_over_pairs(sums, sizes).mean())


def evaluate_classifier(model: tf.keras.Model, points: PaddedPoints,
                        ks: Sequence[int] = DEFAULT_KS, index: str = top_k_index.AUTO,
                        calibration_points: Optional[PaddedPoints] = None,
                        target_recall: float = top_k_index.TARGET_RECALL,
                        class_groups: Sequence[np.ndarray] = ()) -> Dict[str, Any]:
  """P@k and R@k of an XC classifier (`xc_encoder.build_xc_classifier`), and
  its class table's `class_cosine` (`mean_pairwise_cosine`) and, where
  `class_groups` (each client's classes) has a group of two,
  `client_class_cosine` (`mean_cosine_within_groups`).

  `index` (auto: by the number of classes, `top_k_index.resolve_kind`) finds
  the top k classes: brute force, or an approximate index calibrated to
  `target_recall` on `calibration_points`' embeddings (no labels used); then P@k and
  R@k are through it, and 'index_recall@k' is its recall against the exact
  top k on `points`."""
  table = xc_encoder.class_table(model)
  scored_table = xc_encoder.scored_class_table(model)  # Unit rows for cosines.
  embeddings = instance_embeddings(model, points)
  _, top = scoring.chunked_top_k(embeddings, scored_table, max(ks))
  top = top.numpy()
  metrics = {"class_cosine": mean_pairwise_cosine(table.numpy())}
  within = mean_cosine_within_groups(table.numpy(), class_groups)
  if within is not None:
    metrics["client_class_cosine"] = within
  if top_k_index.resolve_kind(index, int(table.shape[0])) == "brute_force":
    return {**precision_recall_at_k(top, points.label_sets, ks), **metrics}
  if calibration_points is None:
    raise ValueError("an approximate index needs calibration points")
  approximate = top_k_index.ApproximateIndex.build(
      scored_table.numpy(), instance_embeddings(model, calibration_points), k=max(ks),
      target_recall=target_recall, calibrated_on=f"{len(calibration_points)} training points")
  found = approximate.search(embeddings, max(ks))[1]
  for k in ks:
    metrics[f"index_recall@{k}"] = top_k_index.overlap_recall(found[:, :k], top[:, :k])
  found = np.where(found < 0, int(table.shape[0]), found)  # No class: never a hit.
  return {**precision_recall_at_k(found, points.label_sets, ks), **metrics}


def map_at_r(embeddings: np.ndarray, labels: np.ndarray) -> Dict[str, Any]:
  """MAP@R and recall@1 (nearest other point of the same class) of retrieval,
  and (`units.UNITS`) each query's average precision."""
  labels = np.asarray(labels)
  _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
  r = counts[inverse] - 1
  queries = np.flatnonzero(r > 0)
  if len(queries) == 0:
    raise ValueError("MAP@R needs a class with >= 2 evaluation points")
  depth = int(r.max())
  _, top = scoring.chunked_top_k(embeddings[queries], embeddings, depth + 1)
  # The R_max nearest other points (the query itself dropped wherever it ranks).
  neighbours = np.stack([row[row != q][:depth] for row, q in zip(top.numpy(), queries)])
  relevant = labels[neighbours] == labels[queries][:, None]
  ranks = np.arange(1, neighbours.shape[1] + 1)
  within_r = ranks[None, :] <= r[queries][:, None]
  precision = np.cumsum(relevant, axis=1) / ranks[None, :]
  average = (precision * relevant * within_r).sum(axis=1) / r[queries]
  return {"map@r": float(average.mean()), "recall@1": float(relevant[:, 0].mean()),
          units.UNITS: units.per_point(average)}


def evaluate_retrieval(model: tf.keras.Model, points: PaddedPoints) -> Dict[str, Any]:
  """MAP@R and recall@1 of the instance tower among `points` (one label each)."""
  return map_at_r(instance_embeddings(model, points),
                  np.array([s[0] for s in points.label_sets]))
