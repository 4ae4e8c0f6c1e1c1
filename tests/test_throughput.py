"""The benchmark script's figures: present, positive and consistent (no timing targets)."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_benchmark_reports_every_path_against_the_tight_loop(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "scripts.benchmark", "--synthetic=small",
       "--loss=batch_softmax", "--rounds=1", "--clients_per_round=5",
       "--steps_per_execution=1", f"--cache_dir={tmp_path}"],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads(result.stdout)
  for key in ("federated_examples_per_sec", "centralized_examples_per_sec",
              "tight_loop_examples_per_sec", "seconds_per_round"):
    assert report[key] > 0, key
  memory = report["federated_memory"]
  assert memory["processes"] >= 2  # Python and the TFF worker.
  assert 0 < memory["peak_rss_mb"] <= memory["peak_rss_mb_sum_of_high_water_marks"] + 1
  assert report["tight_loop_examples_per_sec"] == max(report["tight_loop_by_xla"].values())
  assert report["federated_fraction_of_tight_loop"] == pytest.approx(
      report["federated_examples_per_sec"] / report["tight_loop_examples_per_sec"],
      abs=1e-3)
  assert report["ratio"] == pytest.approx(
      report["federated_examples_per_sec"] / report["centralized_examples_per_sec"],
      abs=1e-3)
