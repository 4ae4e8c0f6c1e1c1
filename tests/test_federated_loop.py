"""Federated runs on the small preset: learning, the IID control, resuming, DP."""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms.differential_privacy import DPConfig
from tasks.movielens import movielens_task
from tests.configs import train_movielens


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
  return str(tmp_path_factory.mktemp("cache"))


def small_task(cache_dir, **kwargs):
  return movielens_task.build_task(movielens_task.TaskConfig(
      synthetic="small", cache_dir=cache_dir, **kwargs))


def test_federated_training_learns_and_beats_popularity(tff_context, cache_dir,
                                                        tmp_path):
  task = small_task(cache_dir)
  results = train_movielens(task, str(tmp_path), "global_softmax", rounds=12,
                            clients_per_round=20, client_learning_rate=0.5,
                            eval_every=6, checkpoint_every=6)
  with open(os.path.join(tmp_path, "metrics.csv")) as f:
    rows = list(csv.DictReader(f))
  assert [int(r["round"]) for r in rows] == list(range(1, 13))
  losses = [float(r["train_loss"]) for r in rows]
  assert sum(losses[-3:]) < 0.9 * sum(losses[:3])
  assert rows[5]["val_global_recall@10"] and not rows[4]["val_global_recall@10"]
  assert results["setting"] == "federated"
  assert results["examples_seen"] == sum(int(float(r["train_num_examples"])) for r in rows)
  popularity = 0.0446  # Most-popular recall@10 on the small preset's test users.
  assert results["test"]["global_recall@10"] > 1.5 * popularity
  assert results["most_popular_baseline"]["global_recall@10"] == pytest.approx(
      popularity, abs=5e-5)
  assert os.path.isfile(os.path.join(tmp_path, "export", "export.json"))


def test_a_dp_run_reports_epsilon_every_round(tff_context, cache_dir, tmp_path):
  task = small_task(cache_dir)
  dp = DPConfig(noise_multiplier=0.8, clip_norm=0.5, target_delta=1e-4)
  results = train_movielens(task, str(tmp_path), "batch_softmax", rounds=4,
                            clients_per_round=24, eval_every=2, checkpoint_every=2,
                            patience=0, dp=dp)
  with open(os.path.join(tmp_path, "metrics.csv")) as f:
    rows = list(csv.DictReader(f))
  probability = 24 / task.federated_train.num_users  # 240 users: q = 0.1.
  epsilons = [float(r["epsilon"]) for r in rows]
  assert epsilons == pytest.approx(
      [differential_privacy.epsilon(dp, probability, r) for r in range(1, 5)])
  assert epsilons == sorted(epsilons) and epsilons[0] > 0
  assert results["epsilon"] == pytest.approx(epsilons[-1])  # Round 4 is reported.
  assert results["target_delta"] == 1e-4
  # Poisson sampling: the rounds' client counts vary around 24 (examples do).
  assert len({r["train_num_examples"] for r in rows}) > 1


@pytest.mark.parametrize("report_model", ["last_gain", "maximum"])
def test_early_stopping_reports_the_best_round_and_resumes_stopped(
    report_model, tff_context, cache_dir, tmp_path):
  """min_improvement_se 1e9: no evaluation can beat the first, so with
  patience 2 the run stops at the first evaluation from round 6 on that is no
  record of the curve, and reports round 2's model (last_gain) or its
  curve's maximum's."""
  task = small_task(cache_dir)
  config = dict(rounds=20, clients_per_round=5, eval_every=2, checkpoint_every=4,
                min_passes=0.0, min_rounds=0, patience=2, min_improvement_se=1e9,
                report_model=report_model)
  results = train_movielens(task, str(tmp_path), "global_softmax", **config)
  with open(os.path.join(tmp_path, "metrics.csv")) as f:
    rows = list(csv.DictReader(f))
  curve = [float(r["val_global_recall@10"]) for r in rows if r["val_global_recall@10"]]
  stop = next(2 * (i + 1) for i in range(2, len(curve)) if curve[i] <= max(curve[:i]))
  maximum = 2 * (int(np.argmax(curve)) + 1)
  assert (results["rounds"], results["best_round"]) == (
      stop, 2 if report_model == "last_gain" else maximum)
  assert [r["val_improved"] for r in rows if r["val_improved"]] == (
      ["1"] + ["0"] * (len(curve) - 1))
  assert [int(r["round"]) for r in rows] == list(range(1, stop + 1))
  assert results["examples_seen"] == sum(int(float(r["train_num_examples"])) for r in rows)

  def weights(name):
    reader = tf.train.load_checkpoint(os.path.join(tmp_path, name, "weights"))
    return {key: reader.get_tensor(key) for key in reader.get_variable_to_shape_map()
            if "OPTIMIZER" not in key and "embeddings" in key}

  best, reported = weights("best"), weights("checkpoint")
  assert best and all(np.array_equal(best[k], reported[k]) for k in best)
  # A stopped run whose results were lost resumes without training further.
  os.remove(os.path.join(tmp_path, "results.json"))
  again = train_movielens(task, str(tmp_path), "global_softmax", **config)
  assert again == results


def test_shuffled_control_is_its_own_setting(tff_context, cache_dir, tmp_path):
  task = small_task(cache_dir, shuffle_across_users=True)
  results = train_movielens(task, str(tmp_path), "batch_softmax", rounds=1,
                            clients_per_round=5)
  assert results["setting"] == "federated_shuffled"
  with open(os.path.join(tmp_path, "run_config.json")) as f:
    assert json.load(f)["task"]["shuffle_across_users"] is True


@pytest.mark.runs_long
def test_a_finished_run_extended_to_more_rounds_equals_one_run_of_them(
    tff_context, cache_dir, tmp_path):
  task = small_task(cache_dir)
  config = dict(clients_per_round=5, eval_every=2, checkpoint_every=3, patience=0)
  extended = os.path.join(tmp_path, "extended")
  assert train_movielens(task, extended, rounds=4, **config)["rounds"] == 4
  results = train_movielens(task, extended, rounds=8, **config)
  expected = train_movielens(task, os.path.join(tmp_path, "one"), rounds=8, **config)
  assert results == expected
  with open(os.path.join(extended, "metrics.csv")) as f:
    assert [int(r["round"]) for r in csv.DictReader(f)] == list(range(1, 9))
  with pytest.raises(ValueError, match=r"another configuration "
                                       r"\(training.loop.clients_per_round: 5 -> 6\)"):
    train_movielens(task, extended, rounds=8, **{**config, "clients_per_round": 6})
