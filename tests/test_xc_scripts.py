"""The XC entry points as real processes: the comparison, a resumed run, bad files."""

import csv
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from tasks.xc import synthetic_xc
from tasks.xc import xc_io
from tasks.xc import xc_task
from tests.script_runs import run_module

QUICK = ["--task=xc", "--rounds=4", "--clients_per_round=20", "--eval_every=2",
         "--patience=0", "--spreadout_k=3"]


def run(*args, timeout=900):
  return run_module(*args, timeout=timeout)


@pytest.mark.runs_long
def test_compare_writes_the_table_3_analogue_from_real_format_files(tmp_path):
  train, test = synthetic_xc.generate(synthetic_xc.PRESETS["xc_tiny"])
  xc_io.write_xc_file(train, os.path.join(tmp_path, "train.txt"))
  xc_io.write_xc_file(test, os.path.join(tmp_path, "test.txt"))
  result = run("scripts.compare", *QUICK, f"--xc_train_path={tmp_path}/train.txt",
               f"--xc_test_path={tmp_path}/test.txt", "--partition=one_label_per_client",
               "--algorithms=fedaws,softmax_oracle", "--centralized_max_epochs=1",
               f"--output_dir={tmp_path}/out")
  assert result.returncode == 0, result.stderr[-3000:]
  # A clean exit: no finalizer's traceback once the worker has stopped.
  assert "Traceback" not in result.stderr and "Connection refused" not in result.stderr
  with open(os.path.join(tmp_path, "out", "results.csv")) as f:
    rows = list(csv.DictReader(f))
  assert [r["run"] for r in rows] == [
      "centralized_one_label", "centralized_all_labels", "centralized_all_labels_residual",
      "fedaws", "softmax_oracle", "most_frequent_labels"]
  for row in rows:
    assert 0.0 <= float(row["precision@1"]) <= 1.0
  # The stronger tower's reference: the residual one, on all labels.
  with open(os.path.join(tmp_path, "out", "centralized_all_labels_residual",
                         "run_config.json")) as f:
    residual = json.load(f)
  assert residual["model"]["residual"] and residual["training"]["label_assignment"] == "all"
  fedaws_down, oracle_down = (int(r["bytes_down_per_client"]) for r in rows[3:5])
  # The oracle sends the whole 200 x 256 class table and the whole bag; FedAwS
  # one row and the bag rows of the client with the most features.
  task = xc_task.build_xc_task(xc_task.XCTaskConfig(
      train_path=f"{tmp_path}/train.txt", test_path=f"{tmp_path}/test.txt"))
  bag_rows = task.bag_rows_per_client()
  assert oracle_down - fedaws_down == 4 * (200 - 1 + task.num_features + 1 -
                                          bag_rows.max()) * 256
  # As deployed, each client gets its own bag rows: the mean, not the largest.
  assert float(rows[3]["mean_real_bytes_down_per_client"]) == pytest.approx(
      fedaws_down - 4 * 256 * (bag_rows.max() - bag_rows.mean()), rel=1e-6)
  assert rows[3]["rounds"] == "4"
  # Gaps to the references: the clients hold one drawn label a point by default.
  fedaws, one_label = float(rows[3]["precision@1"]), float(rows[0]["precision@1"])
  best = max(float(r["precision@1"]) for r in rows[:3])
  assert float(rows[3]["gap_to_same_reference"]) == pytest.approx(fedaws - one_label)
  assert float(rows[3]["gap_to_best_reference"]) == pytest.approx(fedaws - best)
  assert "| fedaws |" in result.stdout and "| centralized_all_labels |" in result.stdout
  assert "XC task: labels 200, features 2000, train_points 3000" in result.stderr
  with open(os.path.join(tmp_path, "out", "curves.png"), "rb") as f:
    assert f.read(4) == b"\x89PNG"
  # Re-running returns the finished runs' results without training.
  again = run("scripts.compare", *QUICK, f"--xc_train_path={tmp_path}/train.txt",
              f"--xc_test_path={tmp_path}/test.txt", "--algorithms=fedaws,softmax_oracle",
              "--centralized_max_epochs=1", f"--output_dir={tmp_path}/out")
  assert again.returncode == 0 and again.stdout == result.stdout


def test_train_federated_exports_a_classifier_that_scores_like_the_server(tmp_path):
  result = run("scripts.train_federated", *QUICK, "--synthetic_xc=xc_tiny",
               "--partition=k_labels_per_client", "--labels_per_client=4",
               "--algorithm=fedaws", f"--output_dir={tmp_path}/run")
  assert result.returncode == 0, result.stderr[-3000:]
  results = json.loads(result.stdout)
  assert results["algorithm"] == "fedaws" and results["partition"] == "k_labels_per_client"
  assert results["task"]["clients"] == 50 and results["task"]["labels"] == 200
  assert results["task"]["points_with_features_cut"] == 0
  export_dir = os.path.join(tmp_path, "run", "export")
  table = np.load(os.path.join(export_dir, "class_embeddings.npy"))
  assert table.shape == (200, 256)
  np.testing.assert_allclose(np.linalg.norm(table, axis=1), 1.0, rtol=1e-5)
  tower = tf.keras.models.load_model(os.path.join(export_dir, "instance_tower"),
                                     compile=False)
  embeddings = tower((np.array([[3, 7, 0]], np.int32), np.array([[0.5, 1.0, 0]], np.float32)))
  assert embeddings.shape == (1, 256)
  np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)


def test_a_bad_xc_file_fails_with_its_line_and_writes_nothing(tmp_path):
  with open(os.path.join(tmp_path, "train.txt"), "w") as f:
    f.write("2 10 5\n0 1:0.5\n9 2:1.0\n")
  with open(os.path.join(tmp_path, "test.txt"), "w") as f:
    f.write("1 10 5\n0 1:0.5\n")
  result = run("scripts.compare", *QUICK, f"--xc_train_path={tmp_path}/train.txt",
               f"--xc_test_path={tmp_path}/test.txt", f"--output_dir={tmp_path}/out")
  assert result.returncode == 2
  assert f"{tmp_path}/train.txt:3: label 9 is beyond the header's num_labels 5" in (
      result.stderr)
  assert result.stderr.strip().splitlines() == [
      f"XC: reading {tmp_path}/train.txt",
      f"error: {tmp_path}/train.txt:3: label 9 is beyond the header's num_labels 5"]
  assert not os.path.exists(os.path.join(tmp_path, "out"))  # Created, locked, removed.


@pytest.mark.parametrize("algorithm", ["fedaws", "softmax_oracle"])
def test_a_dp_run_reports_epsilon_every_round(tmp_path, algorithm):
  result = run("scripts.train_federated", *QUICK, "--synthetic_xc=xc_tiny",
               f"--algorithm={algorithm}", "--noise_multiplier=1", "--clip_norm=0.5",
               "--xc_bag=whole", f"--output_dir={tmp_path}/run")
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(tmp_path, "run", "metrics.csv")) as f:
    epsilons = [float(r["epsilon"]) for r in csv.DictReader(f)]
  assert len(epsilons) == 4 and 0 < epsilons[0] < epsilons[-1]
  with open(os.path.join(tmp_path, "run", "results.json")) as f:
    assert json.load(f)["epsilon"] == pytest.approx(epsilons[-1])


def test_compare_refuses_the_flags_of_another_family(tmp_path):
  result = run("scripts.compare", "--task=xc", "--noise_multipliers=1",
               f"--output_dir={tmp_path}/out")
  assert result.returncode == 2
  assert "--noise_multipliers is a flag of --task=movielens, not --task=xc" in (
      result.stderr)
