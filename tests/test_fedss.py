"""FedSS: key sets, sparse row aggregation, the candidate softmaxes, one round by hand."""

import dataclasses
import functools
import os

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms import row_sums
from fed_retrieval.algorithms import sub_model_answers
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.models import dual_encoder
from fed_retrieval.models import xc_encoder
from fed_retrieval.training import checkpoints
from fed_retrieval.training import round_calls
from losses import sampled_softmax
from tasks import client_data
from tasks.xc import family as xc_family
from tasks.xc import xc_task
from tests.configs import train_xc
from tests.configs import xc_settings_of
from tests.xc_reference import all_client_shapes
from tests.xc_reference import numeric_sgd_step
from tests.xc_reference import numpy_tower
from tests.xc_reference import round_data
from tests.xc_reference import server_average

MODEL = xc_encoder.XCEncoderConfig(num_features=4, num_labels=8, bag_dim=3,
                                   hidden_dims=(), embedding_dim=2, logit_scale=5.0)
DOT_MODEL = dataclasses.replace(MODEL, scoring="dot")  # Paper 003's unnormalized logits.
WIDTH = 2
CLIENTS = [  # Client 0 holds classes 1 and 2; client 1 holds class 5.
    (np.array([[1, 2], [3, 0], [4, 1]]), np.array([[0.5, 0.5], [1.0, 0.0], [0.2, 0.8]]),
     np.array([1, 2, 1])),
    (np.array([[2, 4], [1, 3]]), np.array([[0.7, 0.3], [0.4, 0.6]]), np.array([5, 5])),
]

# The same clients, each label with its point's other held labels (-1: none):
# client 0's first point also carries class 2, which it holds.
CLIENTS_WITH_OTHERS = [
    (ids, values, np.stack([labels, other], axis=1))
    for (ids, values, labels), other in zip(CLIENTS, [np.array([2, -1, -1]),
                                                       np.array([-1, -1])])]


def keys_of(positives, slots=4, classes=50, negatives=10, seed=(0, 1), reserved=()):
  keys, is_real = fedss.sample_key_set(tf.constant(positives, tf.int32), slots, classes,
                                       negatives, tf.constant(seed, tf.int64), reserved)
  return keys.numpy(), is_real.numpy()


def test_key_set_is_fixed_size_without_positives_among_negatives_and_seeded():
  keys, is_real = keys_of([3, 7, 3])
  assert keys.shape == (14,) and is_real.shape == (14,)
  np.testing.assert_array_equal(keys[:4], [3, 7, 3, 3])
  np.testing.assert_array_equal(is_real, [True, True, False, False] + [True] * 10)
  negatives = keys[4:]
  assert len(set(negatives)) == 10 and not {3, 7} & set(negatives)
  assert negatives.min() >= 0 and negatives.max() < 50
  np.testing.assert_array_equal(keys, keys_of([7, 3])[0])  # The same client, round.
  assert set(keys_of([3, 7], seed=(0, 2))[0][4:]) != set(negatives)  # Next round.
  assert set(keys_of([3, 8])[0][4:]) != set(negatives)  # Another client.
  # Reserved ids (MovieLens padding) are never drawn, even when nearly all are.
  for seed in range(5):
    keys, _ = keys_of([1], slots=1, classes=12, negatives=10, seed=(seed, 1),
                      reserved=(0,))
    assert sorted(keys[1:]) == list(range(2, 12))


def test_skip_excluded_maps_ranks_to_the_allowed_ids_by_hand():
  # Ids 0..9 without {0, 3, 4, 9}: the allowed ids are 1, 2, 5, 6, 7, 8.
  ranks = tf.constant([0, 1, 2, 3, 4, 5], tf.int32)
  np.testing.assert_array_equal(
      fedss.skip_excluded(ranks, tf.constant([0, 3, 4, 9], tf.int32)).numpy(),
      [1, 2, 5, 6, 7, 8])
  np.testing.assert_array_equal(
      fedss.skip_excluded(ranks, tf.zeros([0], tf.int32)).numpy(), ranks.numpy())


def test_draw_distinct_is_a_uniform_sample_without_replacement():
  population, count, draws = 20, 5, 4000
  draw = tf.function(functools.partial(fedss.draw_distinct, count), autograph=False)
  hits = np.zeros(population)
  for i in range(draws):  # As a round draws them: traced once, seeded by tensors.
    sample = draw(tf.constant(population), tf.constant([i, 7], tf.int64)).numpy()
    assert len(set(sample)) == count and sample.min() >= 0 and sample.max() < population
    hits[sample] += 1
  expected = draws * count / population
  chi_square = ((hits - expected) ** 2 / expected).sum()
  assert chi_square < 43.8  # The 0.999 quantile of chi-square with 19 d.o.f.
  # All of a population: every value once.
  everything = fedss.draw_distinct(population, tf.constant(population),
                                   tf.constant([1, 2], tf.int64)).numpy()
  assert sorted(everything) == list(range(population))


def test_negatives_are_drawn_without_touching_every_class():
  # 2^31 - 1 classes: a draw over all of them would need 8 GB.
  keys, is_real = keys_of([5, 2 ** 31 - 2], slots=2, classes=2 ** 31 - 1, negatives=100)
  assert is_real.all() and len(set(keys)) == 102
  assert keys[2:].min() >= 0 and keys[2:].max() < 2 ** 31 - 1


def test_key_set_refuses_more_positives_than_slots():
  with pytest.raises(tf.errors.InvalidArgumentError, match="positive slots"):
    keys_of([1, 2, 3], slots=2)


def test_sparse_row_aggregation_matches_numpy():
  rng = np.random.default_rng(0)
  table = rng.normal(size=(6, 3)).astype(np.float32)
  updates = [  # (keys, deltas, is_real): row 2 held by all three, row 0 padded.
      ([2, 4, 2], rng.normal(size=(3, 3)), [True, True, False]),
      ([1, 2, 5], rng.normal(size=(3, 3)), [True, True, True]),
      ([2, 4, 4], rng.normal(size=(3, 3)), [True, True, False]),
  ]
  keys, deltas, real = zip(*updates)

  def applied(row_mean, weights):
    sums = row_sums.RowSums(len(table), 3, row_mean)
    sums.add(sub_model_answers.client_parts(
        [np.array(k) for k in keys], deltas, [np.array(r) for r in real], weights,
        scaled=row_mean == "clients"))
    new_table = table.copy()
    return new_table, sums.add_means(new_table, 1.0)

  new_table, updated = applied("holders", [9.0, 9.0, 9.0])  # Weights do not count.
  expected = table.copy()
  held = {}
  for keys_, deltas_, real_ in updates:
    for key, delta, is_real in zip(keys_, deltas_, real_):
      if is_real:
        held.setdefault(key, []).append(delta)
  for key, held_deltas in held.items():
    expected[key] += np.mean(held_deltas, axis=0)
  np.testing.assert_allclose(new_table, expected, atol=1e-6)
  np.testing.assert_array_equal(updated, [1, 2, 4, 5])
  # FedAvg's mean over every client (row_mean="clients"): examples 2, 5, 3 weigh
  # the deltas and divide their sum; a row a client did not hold counts as 0.
  weights = [2.0, 5.0, 3.0]
  new_table, _ = applied("clients", weights)
  expected = table.copy()
  for (keys_, deltas_, real_), weight in zip(updates, weights):
    for key, delta, is_real in zip(keys_, deltas_, real_):
      expected[key] += is_real * weight * delta / sum(weights)
  np.testing.assert_allclose(new_table, expected, atol=1e-6)
  np.testing.assert_array_equal(new_table[[0, 3]], table[[0, 3]])


def numpy_candidate_loss(logits, positions, allowed, log_q=None):
  if log_q is not None:
    logits = logits - log_q
  losses = []
  for row, position, mask in zip(logits, positions, allowed):
    kept = row[mask]
    losses.append(np.log(np.exp(kept - kept.max()).sum()) + kept.max() - row[position])
  return np.mean(losses)


def test_candidate_softmaxes_match_numpy():
  rng = np.random.default_rng(1)
  logits = rng.normal(size=(3, 7)).astype(np.float32) * 3
  positions = np.array([0, 1, 0])
  is_positive = np.array([True, True, False, False, False, False, False])  # 2 is padding.
  is_negative = np.array([False, False, False, True, True, True, True])
  expected_masks = {
      "sampled_softmax": np.tile(is_positive | is_negative, (3, 1)),
      "pos_only": np.tile(is_positive, (3, 1)),
      "neg_only": np.array([is_negative | (np.arange(7) == p) for p in positions]),
  }
  for name, allowed in expected_masks.items():
    mask = sampled_softmax.candidate_mask(tf.constant(positions), tf.constant(is_positive),
                                          tf.constant(is_negative), name)
    np.testing.assert_array_equal(mask.numpy(), allowed)
    got = sampled_softmax.candidate_softmax_loss(tf.constant(logits),
                                                 tf.constant(positions), mask)
    np.testing.assert_allclose(got.numpy(), numpy_candidate_loss(logits, positions,
                                                                 allowed), rtol=1e-5)
  # logQ: 4 negatives drawn from the 100 - 2 non-positive classes.
  log_q = sampled_softmax.log_q_correction(tf.constant(is_negative), 4, 100,
                                           tf.constant(2)).numpy()
  np.testing.assert_allclose(log_q, np.where(is_negative, np.log(4 / 98), 0.0), rtol=1e-6)
  mask = expected_masks["sampled_softmax"]
  got = sampled_softmax.candidate_softmax_loss(tf.constant(logits), tf.constant(positions),
                                               tf.constant(mask), tf.constant(log_q))
  np.testing.assert_allclose(got.numpy(), numpy_candidate_loss(logits, positions, mask,
                                                               log_q), rtol=1e-5)


@pytest.mark.parametrize("algorithm", ["fedss", "full_softmax"])
def test_sampled_softmax_over_every_class_is_full_softmax(algorithm):
  rng = np.random.default_rng(2)
  queries = rng.normal(size=(4, 3)).astype(np.float32)
  queries /= np.linalg.norm(queries, axis=1, keepdims=True)
  table = rng.normal(size=(6, 3)).astype(np.float32)
  labels = np.array([0, 3, 3, 5])
  # fedss: positives {0, 3, 5} in the slots, the other 3 classes as negatives.
  keys = np.array([0, 3, 5, 1, 2, 4]) if algorithm == "fedss" else np.arange(6)
  config = FedSSConfig(algorithm=algorithm, num_negatives=3, positives_per_client=3)
  positions = np.array([list(keys).index(label) for label in labels])
  unit = table / np.linalg.norm(table, axis=1, keepdims=True)
  got = fedss.candidate_loss(tf.constant(20.0 * queries @ unit[keys].T),
                             tf.constant(positions), tf.ones([6], tf.bool), config,
                             num_classes=6)
  full = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
      labels, 20.0 * queries @ unit.T)
  np.testing.assert_allclose(got.numpy(), full.numpy(), rtol=1e-5)


def numpy_round_loss(tower, rows, ids, values, positions, allowed, model, log_q=None):
  if model.scoring == "dot":
    logits = numpy_tower(tower, ids, values, normalize=False) @ rows.T
  else:
    unit = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    logits = model.logit_scale * numpy_tower(tower, ids, values) @ unit.T
  return numpy_candidate_loss(logits, positions, allowed, log_q)


def numpy_log_q(keys, is_real, slots, classes, negatives):
  """log q of each key: 0 for a positive, log(negatives / (classes - the
  client's real positives)) for a sampled negative."""
  is_negative = is_real & (np.arange(len(keys)) >= slots)
  positives = np.sum(is_real & ~is_negative)
  return np.where(is_negative, np.log(negatives / (classes - positives)), 0.0)


@pytest.mark.parametrize("row_mean,bag,shards,clients,model,log_q", [
    ("holders", "selected", None, CLIENTS, MODEL, True),
    ("clients", "selected", None, CLIENTS, MODEL, True),
    ("clients", "selected", None, CLIENTS, MODEL, False),  # Uncorrected logits.
    ("holders", "whole", None, CLIENTS, MODEL, True),
    ("clients", "selected", [[0, 1]], CLIENTS, MODEL, True),  # One TFF client, both.
    ("holders", "whole", [[0], [1]], CLIENTS, MODEL, True),
    # A point's other held label is never its negative.
    ("clients", "selected", None, CLIENTS_WITH_OTHERS, MODEL, True),
    ("holders", "whole", [[0, 1]], CLIENTS_WITH_OTHERS, MODEL, True),
    ("clients", "selected", None, CLIENTS, DOT_MODEL, True)])
def test_one_fedss_round_matches_a_hand_computation(row_mean, bag, shards, clients, model,
                                                    log_q):
  config = FedSSConfig(num_negatives=3, positives_per_client=2, client_learning_rate=0.4,
                       server_optimizer="sgd", server_learning_rate=1.0,
                       row_mean=row_mean, row_learning_rate=2.0, log_q=log_q)
  other_labels = clients[0][2].shape[1] - 1 if clients[0][2].ndim == 2 else 0
  process = fedss.build_xc_process(model, config, max_features=WIDTH, seed=3, bag=bag,
                                   sharded=shards is not None, other_labels=other_labels)
  state = process.initialize()
  start = [np.asarray(w, np.float64) for w in process.get_model_weights(state).trainable]
  tower, table = start[:-1], start[-1]
  got = [np.asarray(w) for w in process.get_model_weights(
      process.next(state, round_data(clients, shards)).state).trainable]

  tower_deltas, row_deltas, weighted_row_deltas, sizes = [], {}, {}, []
  for ids, values, client_labels in clients:
    labels = client_labels if client_labels.ndim == 1 else client_labels[:, 0]
    others = client_labels[:, 1:] if client_labels.ndim == 2 else labels[:, None] * 0 - 1
    keys, is_real = keys_of(labels, slots=2, classes=8, negatives=3, seed=(3, 1))
    rows = table[keys]
    positions = np.array([list(keys).index(label) for label in labels])
    allowed = np.array([is_real & ~np.isin(keys, other) for other in others])
    correction = numpy_log_q(keys, is_real, 2, 8, 3) if log_q else None

    def loss(tower_weights, client_rows):
      return numpy_round_loss(tower_weights, client_rows, ids, values, positions,
                              allowed, model, correction)

    new_tower, new_rows = numeric_sgd_step(tower, rows, loss, 0.4)
    tower_deltas.append([n - o for n, o in zip(new_tower, tower)])
    for key, delta, real in zip(keys, new_rows - rows, is_real):
      if real:
        row_deltas.setdefault(key, []).append(delta)
        weighted_row_deltas.setdefault(key, []).append(len(labels) * delta)
    sizes.append(len(labels))
  expected_tower, expected_table = server_average(tower, table, tower_deltas, sizes,
                                                   row_deltas)
  if row_mean == "clients":  # Every client's examples weigh; non-holders add 0.
    for key, deltas in weighted_row_deltas.items():
      expected_table[key] = table[key] + np.sum(deltas, axis=0) / sum(sizes)
  for key in row_deltas:  # The rows' server rate, 2: twice the mean delta.
    expected_table[key] = table[key] + 2.0 * (expected_table[key] - table[key])
  for g, e in zip(got[:-1], expected_tower):
    np.testing.assert_allclose(g, e, atol=2e-5)
  np.testing.assert_allclose(got[-1], expected_table, atol=2e-5)
  assert len(row_deltas) < MODEL.num_labels  # Some rows nobody held...
  for c in set(range(MODEL.num_labels)) - set(row_deltas):
    np.testing.assert_array_equal(got[-1][c], table[c].astype(np.float32))  # ...stay.


def test_bytes_follow_the_shapes_and_only_full_softmax_sends_the_table():
  tower = 4 * sum(np.prod(s) for s in MODEL.weight_shapes())
  table_shape = (MODEL.num_labels, MODEL.embedding_dim)
  for algorithm, keys in [("fedss", 2 + 3), ("neg_only", 2 + 3), ("pos_only", 2),
                          ("full_softmax", MODEL.num_labels)]:
    config = FedSSConfig(algorithm=algorithm, num_negatives=3, positives_per_client=2)
    down, up = fedss.bytes_per_client(MODEL.weight_shapes(), MODEL.num_labels,
                                      MODEL.embedding_dim, config)
    assert down == tower + 4 * keys * MODEL.embedding_dim
    process = fedss.build_xc_process(MODEL, config, max_features=WIDTH)
    sends_table = table_shape in all_client_shapes(process)
    assert sends_table == (algorithm == "full_softmax")
    if algorithm == "full_softmax":
      assert up == down + 8
    else:  # Tower and row deltas, the keys twice (request, update), the mask, 2 sums.
      assert up == tower + 4 * keys * MODEL.embedding_dim + 3 * 4 * keys + 8


@pytest.mark.parametrize("sharded", [False, True])
def test_movielens_key_set_covers_contexts_and_labels_and_skips_padding(sharded):
  model = dual_encoder.DualEncoderConfig(vocabulary_size=30, max_context_length=3,
                                         embedding_dim=4)
  config = FedSSConfig(num_negatives=5, positives_per_client=6)
  process = fedss.build_movielens_process(model, config, temperature=0.05,
                                          sharded=sharded)
  clients = client_data.ClientDatasets(np.array([[1, 2, 0], [2, 3, 4]], np.int32),
                                       np.array([5, 6], np.int32), {"0": np.arange(2)})
  data = (clients.shard_dataset(["0"], 2, 1, [None]) if sharded  # A shard of it alone.
          else clients.training_dataset("0", 2))
  state = process.initialize()
  before = np.asarray(process.get_model_weights(state).trainable[0])
  after = np.asarray(process.get_model_weights(process.next(state, [data]).state)
                     .trainable[0])
  moved = set(np.flatnonzero(np.abs(after - before).sum(1) > 0))
  assert {1, 2, 3, 4, 5, 6} <= moved  # Every item the client touches ...
  assert 0 not in moved and len(moved) <= 6 + 5  # ... plus at most its negatives.


@pytest.mark.parametrize("algorithm,row_mean", [
    ("fedss", "clients"), ("full_softmax", "holders"), ("full_softmax", "clients")])
def test_sharded_rounds_equal_a_tff_client_each(tff_context, algorithm, row_mean):
  # Two rounds with server Adam, seeded shuffles and several batches a client:
  # 5 clients in 2 TFF calls train and aggregate as 5 calls do.
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(
      synthetic="xc_tiny", partition="k_labels_per_client", labels_per_client=3))
  clients = task.clients.client_ids[:5]
  weights = []
  for shards in (0, 2):
    config = xc_settings_of(
        task.config, fedss=FedSSConfig(num_negatives=5, row_mean=row_mean),
        clients_per_round=5, client_shards=shards)
    process = xc_family.build_process(task, xc_family.model_config_for(task, config),
                                      config, algorithm)
    state = process.initialize()
    for round_num in range(2):
      state = process.next(state, round_calls.round_datasets(
          task.clients, clients, config.loop, round_num, shards)).state
    weights.append(process.get_model_weights(state).trainable)
  # (A shard sums its clients' deltas before the round's mean: rounding
  # apart, 2e-5.)
  for alone, sharded in zip(*weights):
    np.testing.assert_allclose(sharded, alone, atol=2e-5)
  assert any(np.any(a != b) for a, b in zip(
      weights[0], process.get_model_weights(process.initialize()).trainable))


def test_default_negatives_are_five_percent_of_the_classes():
  assert FedSSConfig().for_classes(159).negatives == 8  # Bibtex.
  assert FedSSConfig().for_classes(2_000).negatives == 100
  assert FedSSConfig(num_negatives=3).for_classes(2_000).negatives == 3
  assert FedSSConfig(algorithm="pos_only").for_classes(2_000).negatives == 0
  with pytest.raises(ValueError, match="for_classes"):
    FedSSConfig().negatives  # pylint: disable=expression-not-assigned


def test_a_resumed_sub_model_run_equals_one_run(tff_context, tmp_path):
  # FedSS with a selected bag and server Adam: the NumPy state (tower, table,
  # optimizer moments, round) goes through the loop's checkpoints, and the
  # negatives are a function of (seed, round, client).
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(
      synthetic="xc_tiny", partition="k_labels_per_client", labels_per_client=4))
  config = dict(fedss=FedSSConfig(num_negatives=10), clients_per_round=6, eval_every=2,
                checkpoint_every=3, patience=0)
  extended = os.path.join(tmp_path, "extended")
  assert train_xc(task, extended, "fedss", rounds=4, **config)["rounds"] == 4
  resumed = train_xc(task, extended, "fedss", rounds=6, **config)
  expected = train_xc(task, os.path.join(tmp_path, "one"), "fedss", rounds=6, **config)
  assert resumed["test"] == expected["test"]
  assert resumed["examples_seen"] == expected["examples_seen"]
  # Resumed from round 4's checkpoint, none set aside as unreadable.
  assert not [name for name in os.listdir(os.path.join(extended, "checkpoints"))
              if name.startswith(checkpoints.UNREADABLE_PREFIX)]


def test_row_learning_rate_scales_the_whole_tables_step_alone(tff_context):
  # Full softmax, one round at row rate 1 and 3 from the same state: the
  # table moves 3x as far, the tower identically (selected rows: the hand
  # computation above, at rate 2).
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(
      synthetic="xc_tiny", partition="k_labels_per_client", labels_per_client=3))
  clients = task.clients.client_ids[:4]
  after = {}
  for rate in (1.0, 3.0):
    config = xc_settings_of(task.config, fedss=FedSSConfig(
        num_negatives=5, row_learning_rate=rate), clients_per_round=4)
    process = xc_family.build_process(task, xc_family.model_config_for(task, config),
                                      config, "full_softmax")
    state = process.initialize()
    initial = process.get_model_weights(state).trainable
    after[rate] = process.get_model_weights(process.next(state, round_calls.round_datasets(
        task.clients, clients, config.loop, 0, config.loop.client_shards)).state).trainable
  *tower_1, table_1 = after[1.0]
  *tower_3, table_3 = after[3.0]
  step = table_1 - initial[-1]
  assert np.all(np.abs(step).sum(1) > 0)  # Every row moved.
  np.testing.assert_allclose(table_3 - initial[-1], 3 * step, rtol=1e-4, atol=1e-6)
  for one, three in zip(tower_1, tower_3):
    np.testing.assert_array_equal(one, three)
  with pytest.raises(ValueError, match="row_learning_rate"):
    FedSSConfig(row_learning_rate=0.0)
