"""scripts/prepare_movielens.py end to end, and its bad-input behaviour."""

import json
import os

import numpy as np
import tensorflow as tf

from tasks.movielens import item_vocabulary
from tasks.movielens import movielens_task
from tasks.movielens import prepared_dataset
from tests.script_runs import run_module


def run_script(*args):
  return run_module("scripts.prepare_movielens", *args)


def count_records(path, context_length):
  dataset = tf.data.TFRecordDataset(path).map(
      lambda r: tf.io.parse_single_example(r, prepared_dataset.feature_spec(context_length)))
  return sum(1 for _ in dataset)


def test_writes_tfrecords_and_stats(tmp_path):
  output_dir = os.path.join(tmp_path, "prepared")
  result = run_script("--synthetic=small", f"--output_dir={output_dir}",
                      f"--cache_dir={tmp_path}", "--max_context_length=5")
  assert result.returncode == 0, result.stderr
  with open(os.path.join(output_dir, "stats.json")) as f:
    stats = json.load(f)
  splits = stats["splits"]
  assert stats["vocabulary_size"] == 401
  assert item_vocabulary.load(output_dir).num_items == stats["items"] == 400
  assert splits["federated_train"]["users"] == 240
  assert splits["federated_val"]["users"] == splits["federated_test"]["users"] == 30
  assert stats["total_examples"] == stats["total_ratings"] - stats["total_users"]
  assert count_records(os.path.join(output_dir, "train.tfrecord"), 5) == \
      splits["centralized_train"]["examples"]
  assert count_records(os.path.join(output_dir, "test.tfrecord"), 5) == \
      splits["centralized_test"]["examples"]
  assert 0.1 < stats["top_decile_movies_share_of_train_positives"] < 1.0


def test_top_decile_share_by_hand():
  # 20 items (+ padding): the top 10% are 2 items, holding 5 + 3 of 12 labels.
  labels = np.array([7] * 5 + [2] * 3 + [1, 4, 9, 20])
  assert movielens_task.top_decile_share(labels, 21) == round(8 / 12, 4)
  # 5 items: the top decile rounds up to one item, padding is never counted.
  assert movielens_task.top_decile_share(np.array([0, 0, 3, 3, 1]), 6) == round(2 / 3, 4)


def test_malformed_file_fails_cleanly_without_output(tmp_path):
  ratings = os.path.join(tmp_path, "ratings.dat")
  with open(ratings, "w") as f:
    f.write("1::2::3::4\n1::3::3::5\n1::4::3\n")
  output_dir = os.path.join(tmp_path, "out")
  result = run_script(f"--ratings_path={ratings}", f"--output_dir={output_dir}")
  assert result.returncode == 2
  assert f"error: {ratings}:3: expected 4 fields" in result.stderr
  assert os.listdir(tmp_path) == ["ratings.dat"]


def test_bad_split_flag_is_named(tmp_path):
  result = run_script("--synthetic=small", f"--output_dir={tmp_path}/out",
                      "--example_split=0.9,0.2", f"--cache_dir={tmp_path}")
  assert result.returncode == 2
  assert "--example_split: fractions must add up to 1" in result.stderr
  assert not os.path.exists(os.path.join(tmp_path, "out"))


def _three_ratings(tmp_path) -> str:
  ratings = os.path.join(tmp_path, "ratings.csv")
  with open(ratings, "w") as f:
    f.write("userId,movieId,rating,timestamp\n1,10,4.0,1\n1,20,4.0,2\n1,30,4.0,3\n")
  return ratings


def test_too_little_data_warns_naming_each_empty_split_and_its_cause(tmp_path):
  ratings = _three_ratings(tmp_path)
  result = run_script(f"--ratings_path={ratings}", f"--output_dir={tmp_path}/out")
  assert result.returncode == 0, result.stderr
  warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
  assert warnings == [
      f"warning: --ratings_path={ratings}: the {split} split is empty (3 ratings; 1 "
      "users with >= --min_timeline_length=3 ratings, and --user_split gives it 0.1 of "
      "them: it needs at least 10 such users)" for split in ("federated_val",
                                                             "federated_test")] + [
      f"warning: --ratings_path={ratings}: the centralized_test split is empty (3 "
      "ratings; 2 examples, and --example_split gives it 0.1 of them: it needs at "
      "least 10)"]


def test_training_on_too_little_data_is_one_line_naming_the_split(tmp_path):
  ratings = _three_ratings(tmp_path)
  result = run_module("scripts.train_centralized", f"--ratings_path={ratings}",
                      "--split_by=user", f"--output_dir={tmp_path}/run")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      f"error: --ratings_path={ratings}: the federated_val split is empty (3 ratings; "
      "1 users with >= --min_timeline_length=3 ratings, and --user_split gives it 0.1 "
      "of them: it needs at least 10 such users)")
  assert not os.path.exists(os.path.join(tmp_path, "run"))
