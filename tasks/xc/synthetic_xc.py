"""Deterministic synthetic extreme-classification data (the embedded default).

What it imitates, and why each part is there:
- Labels belong to topics; a topic's labels draw their signature features from
  the topic's block of the vocabulary, so labels of one topic are *confusable*
  (they share features) while a few features of each label are its own.
- Points are multi-label: a primary label (Zipf popularity, every label has at
  least `min_points_per_label` training points), its fixed *partner* label with
  probability `partner_probability`, and random labels of the same topic
  (labels that *co-occur*).
- Features: draws from each label's signature, from the topic block and from the
  whole vocabulary (noise), counted and L2-normalized like tf-idf rows.
The same seed gives the same data; train and test come from one generator
(different points of the same distribution).
"""

import dataclasses
from typing import Dict, Tuple

import numpy as np
import scipy.sparse

from tasks.xc.xc_io import XCData

# Points generated at once; larger sets are generated chunk by chunk (the
# presets up to xc_10k fit in one chunk, so their data is as before).
POINTS_PER_CHUNK = 200_000


@dataclasses.dataclass(frozen=True)
class SyntheticXCConfig:
  num_labels: int
  num_features: int
  num_train: int
  num_test: int
  num_topics: int
  features_per_topic: int = 200
  signature_features: int = 12
  draws_per_label: int = 6
  topic_draws: int = 4
  noise_draws: int = 4
  partner_probability: float = 0.5
  extra_topic_labels: float = 0.7  # Mean count of further labels of the topic.
  zipf_exponent: float = 0.6
  min_points_per_label: int = 3
  seed: int = 0


PRESETS: Dict[str, SyntheticXCConfig] = {
    # 2,000 labels in 100 topics of 20: the default for runs and the comparison.
    "xc_small": SyntheticXCConfig(num_labels=2_000, num_features=20_000,
                                  num_train=40_000, num_test=8_000, num_topics=100),
    # The same with another seed, flatter popularity and more co-occurring
    # labels: the second preset defaults are checked on.
    "xc_small_alt": SyntheticXCConfig(num_labels=2_000, num_features=20_000,
                                      num_train=40_000, num_test=8_000, num_topics=80,
                                      zipf_exponent=0.3, extra_topic_labels=1.2,
                                      partner_probability=0.3, seed=1),
    # 10,000 labels in 400 topics of 25: FedSS's label space (paper 003 samples
    # <= 5% of the classes); the same with another seed checks its defaults.
    "xc_10k": SyntheticXCConfig(num_labels=10_000, num_features=50_000,
                                num_train=100_000, num_test=15_000, num_topics=400),
    "xc_10k_alt": SyntheticXCConfig(num_labels=10_000, num_features=50_000,
                                    num_train=100_000, num_test=15_000, num_topics=320,
                                    zipf_exponent=0.3, extra_topic_labels=1.2,
                                    partner_probability=0.3, seed=1),
    # 100k labels (the extreme setting of the FedAwS benchmark).
    "xc_large": SyntheticXCConfig(num_labels=100_000, num_features=200_000,
                                  num_train=600_000, num_test=50_000, num_topics=5_000),
    # The shapes of paper 000's Table 2 (labels, features, train and test
    # points), with each point's label count near the real sets' (AmazonCat-13K
    # 5.04 labels a point, Amazon-670K 5.45): generated in chunks of
    # POINTS_PER_CHUNK points, so memory stays bounded.
    "xc_amazoncat13k": SyntheticXCConfig(num_labels=13_330, num_features=203_882,
                                         num_train=1_186_239, num_test=306_782,
                                         num_topics=530, extra_topic_labels=4.0),
    "xc_amazon670k": SyntheticXCConfig(num_labels=670_091, num_features=135_909,
                                       num_train=490_449, num_test=153_025,
                                       num_topics=5_000, extra_topic_labels=4.0,
                                       min_points_per_label=0),
    # A few hundred labels: tests and quick checks.
    "xc_tiny": SyntheticXCConfig(num_labels=200, num_features=2_000, num_train=3_000,
                                 num_test=600, num_topics=20, features_per_topic=50),
}


@dataclasses.dataclass(frozen=True)
class _Structure:
  topic_of_label: np.ndarray  # [L]
  signatures: np.ndarray  # [L, signature_features] feature ids
  partner: np.ndarray  # [L]
  labels_of_topic: Tuple[np.ndarray, ...]
  popularity: np.ndarray  # [L], sums to 1


def _structure(config: SyntheticXCConfig, rng: np.random.Generator) -> _Structure:
  topics = rng.permutation(np.arange(config.num_labels) % config.num_topics)
  block = min(config.features_per_topic, config.num_features // config.num_topics)
  if block < 2:
    raise ValueError("synthetic XC: too few features for the topics")
  topic_start = np.arange(config.num_topics) * block
  own = rng.integers(0, block, size=(config.num_labels, config.signature_features))
  signatures = topic_start[topics][:, None] + own
  # A third of each signature is the label's own: features beyond the topic blocks.
  spare = config.num_features - config.num_topics * block
  if spare > 0:
    count = config.signature_features // 3
    signatures[:, :count] = config.num_topics * block + rng.integers(
        0, spare, size=(config.num_labels, count))
  labels_of_topic = tuple(np.flatnonzero(topics == t) for t in range(config.num_topics))
  partner = np.empty(config.num_labels, np.int64)
  for members in labels_of_topic:
    cycle = rng.permutation(members)  # Each label's partner: the next in a cycle.
    partner[cycle] = np.roll(cycle, -1)
  weights = 1.0 / np.arange(1, config.num_labels + 1) ** config.zipf_exponent
  popularity = np.empty(config.num_labels)
  popularity[rng.permutation(config.num_labels)] = weights / weights.sum()
  return _Structure(topics, signatures, partner, labels_of_topic, popularity)


def _points(config: SyntheticXCConfig, structure: _Structure, primary: np.ndarray,
            rng: np.random.Generator) -> XCData:
  n = len(primary)
  label_sets = []
  extra = rng.poisson(config.extra_topic_labels, size=n)
  with_partner = rng.random(n) < config.partner_probability
  for i in range(n):
    members = structure.labels_of_topic[structure.topic_of_label[primary[i]]]
    chosen = [primary[i]]
    if with_partner[i]:
      chosen.append(structure.partner[primary[i]])
    if extra[i]:
      chosen.extend(rng.choice(members, size=min(extra[i], len(members))))
    label_sets.append(np.unique(np.asarray(chosen, np.int64)))
  pair_point = np.repeat(np.arange(n), [len(s) for s in label_sets])
  pair_label = np.concatenate(label_sets)
  columns = rng.integers(0, config.signature_features,
                         size=(len(pair_label), config.draws_per_label))
  signature_ids = structure.signatures[pair_label[:, None], columns]
  topic_block = min(config.features_per_topic, config.num_features // config.num_topics)
  topic_ids = (structure.topic_of_label[primary][:, None] * topic_block +
               rng.integers(0, topic_block, size=(n, config.topic_draws)))
  noise_ids = rng.integers(0, config.num_features, size=(n, config.noise_draws))
  rows = np.concatenate([np.repeat(pair_point, config.draws_per_label),
                         np.repeat(np.arange(n), config.topic_draws),
                         np.repeat(np.arange(n), config.noise_draws)])
  cols = np.concatenate([signature_ids.ravel(), topic_ids.ravel(), noise_ids.ravel()])
  counts = scipy.sparse.csr_matrix((np.ones(len(rows), np.float32), (rows, cols)),
                                   shape=(n, config.num_features))
  counts.sum_duplicates()
  norms = np.sqrt(np.asarray(counts.multiply(counts).sum(axis=1)).ravel())
  features = scipy.sparse.diags(1.0 / np.maximum(norms, 1e-12)).dot(counts).tocsr()
  return XCData(features.astype(np.float32), label_sets, config.num_labels)


def generate(config: SyntheticXCConfig) -> Tuple[XCData, XCData]:
  """(train, test) points of the preset; the same config gives the same data."""
  rng = np.random.default_rng(config.seed)
  structure = _structure(config, rng)
  guaranteed = np.repeat(np.arange(config.num_labels), config.min_points_per_label)
  if len(guaranteed) > config.num_train:
    raise ValueError("synthetic XC: num_train < num_labels * min_points_per_label")
  primary_train = np.concatenate([guaranteed, rng.choice(
      config.num_labels, size=config.num_train - len(guaranteed),
      p=structure.popularity)])
  primary_test = rng.choice(config.num_labels, size=config.num_test,
                            p=structure.popularity)
  train = _chunked_points(config, structure, rng.permutation(primary_train), rng)
  test = _chunked_points(config, structure, primary_test, rng)
  return train, test


def _chunked_points(config: SyntheticXCConfig, structure: _Structure,
                    primary: np.ndarray, rng: np.random.Generator) -> XCData:
  """`_points` of POINTS_PER_CHUNK primaries at a time, stacked."""
  chunks = [_points(config, structure, primary[start:start + POINTS_PER_CHUNK], rng)
            for start in range(0, len(primary), POINTS_PER_CHUNK)]
  if len(chunks) == 1:
    return chunks[0]
  return XCData(scipy.sparse.vstack([c.features for c in chunks]).tocsr(),
                [s for c in chunks for s in c.labels], config.num_labels)
