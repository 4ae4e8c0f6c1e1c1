"""Precision@k and recall@k of multi-label predictions, over all classes.

precision@k = |top-k classes of a point that are true labels| / k, averaged
over points (the XC repository's P@k); recall@k = the same count / the number of
true labels. The top-k come from a chunked search over the whole class table
(`scoring.chunked_top_k`), so no dense points x classes matrix is built.
"""

from typing import Dict, Sequence

import numpy as np
import tensorflow as tf

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
                          ks: Sequence[int] = DEFAULT_KS) -> Dict[str, float]:
  found = hits(top_ids, label_sets)
  sizes = np.array([max(len(s), 1) for s in label_sets], np.float64)
  metrics = {}
  for k in ks:
    count = found[:, :k].sum(axis=1)
    metrics[f"precision@{k}"] = float(np.mean(count / k))
    metrics[f"recall@{k}"] = float(np.mean(count / sizes))
  return metrics


def instance_embeddings(model: tf.keras.Model, points: PaddedPoints,
                        batch_size: int = 4096) -> np.ndarray:
  tower = model.get_layer("instance_tower")
  return np.concatenate([
      tower((points.feature_ids[i:i + batch_size],
             points.feature_values[i:i + batch_size])).numpy()
      for i in range(0, len(points), batch_size)])


def evaluate_classifier(model: tf.keras.Model, points: PaddedPoints,
                        ks: Sequence[int] = DEFAULT_KS) -> Dict[str, float]:
  """P@k and R@k of an XC classifier (`xc_encoder.build_xc_classifier`)."""
  table = scoring.l2_normalize(xc_encoder.class_table(model))
  _, top = scoring.chunked_top_k(instance_embeddings(model, points), table, max(ks))
  return precision_recall_at_k(top.numpy(), points.label_sets, ks)
