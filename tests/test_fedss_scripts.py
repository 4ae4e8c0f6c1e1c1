"""FedSS through the comparison script, as real processes: XC with classes held
out (MAP@R) and MovieLens sampled global softmax."""

import csv
import os

import pytest

from tests.script_runs import run_module

QUICK = ["--rounds=3", "--clients_per_round=10", "--eval_every=3", "--patience=0"]


def compare(tmp_path, *args):
  result = run_module("scripts.compare", *QUICK, *args, f"--output_dir={tmp_path}/out")
  assert result.returncode == 0, result.stderr[-3000:]
  with open(os.path.join(tmp_path, "out", "results.csv")) as f:
    rows = list(csv.DictReader(f))
  with open(os.path.join(tmp_path, "out", "quality_vs_bytes.png"), "rb") as f:
    assert f.read(4) == b"\x89PNG"
  return rows


def test_xc_fedss_on_held_out_classes_reports_map_at_r_and_bytes(tmp_path):
  rows = compare(tmp_path, "--task=xc", "--synthetic_xc=xc_tiny",
                 "--partition=k_labels_per_client", "--labels_per_client=4",
                 "--xc_class_split=disjoint", "--algorithms=fedss,pos_only",
                 "--num_negatives=20")
  assert [r["run"] for r in rows] == ["fedss", "pos_only"]  # No label reference.
  for row in rows:
    assert 0.0 < float(row["map@r"]) <= 1.0 and "precision@1" not in row
  fedss_down, pos_only_down = (int(r["bytes_down_per_client"]) for r in rows)
  assert fedss_down - pos_only_down == 4 * 20 * 256  # The 20 negatives' rows.
  real_down = [float(r["mean_real_bytes_down_per_client"]) for r in rows]
  assert real_down[0] - real_down[1] == pytest.approx(4 * 20 * 256)
  assert real_down[0] < fedss_down  # Each client's own bag rows, not the largest's.


def test_movielens_sampled_global_softmax_moves_fewer_bytes_than_full(tmp_path):
  rows = compare(tmp_path, "--synthetic=small", f"--cache_dir={tmp_path}/cache",
                 "--losses=", "--algorithms=fedss,full_softmax", "--num_negatives=30")
  assert [r["run"] for r in rows] == ["federated_fedss global_softmax",
                                      "federated_full_softmax global_softmax",
                                      "most_popular"]
  for row in rows:
    assert 0.0 <= float(row["global_recall@10"]) <= 1.0
  fedss_down, full_down = (int(r["bytes_down_per_client"]) for r in rows[:2])
  assert full_down == 4 * 401 * 16  # The whole table (400 items + padding), 16-dim.
  assert fedss_down < full_down
