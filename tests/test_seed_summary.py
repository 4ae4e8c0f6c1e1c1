"""A comparison over seeds: each run's mean and standard error over the seeds,
its table, and `compare.py --seeds` end to end."""

import csv
import math
import os

import numpy as np
import pytest

from fed_retrieval.reports import seed_summary
from tests.script_runs import run_module

METRIC = "precision@1"


def rows(fedss, full, reference, baseline=0.40):
  """One seed's comparison rows: a reference, two federated runs, a baseline."""
  return [
      {"group": "", "run": "centralized_one_label", "kind": "centralized",
       METRIC: reference, "passes": 6.0},
      {"group": "", "run": "fedss", "kind": "federated", METRIC: fedss,
       "gap_to_same_reference": fedss - reference, "gap_to_best_reference": fedss - reference,
       "passes": 18.0},
      {"group": "", "run": "full_softmax", "kind": "federated", METRIC: full,
       "gap_to_same_reference": full - reference, "gap_to_best_reference": full - reference,
       "passes": 16.0},
      {"group": "", "run": "most_frequent_labels", "kind": "baseline", METRIC: baseline},
  ]


def test_each_run_is_its_mean_over_seeds_with_the_error_of_that_mean():
  by_seed = {0: rows(0.4662, 0.5090, 0.4851), 1: rows(0.4811, 0.4521, 0.4851),
             2: rows(0.4493, 0.5118, 0.4851)}
  summary = {r["run"]: r for r in seed_summary.across_seeds(by_seed, METRIC)}
  fedss = np.array([0.4662, 0.4811, 0.4493])
  assert summary["fedss"][METRIC] == pytest.approx(fedss.mean())
  assert summary["fedss"][f"{METRIC}_se"] == pytest.approx(fedss.std(ddof=1) / math.sqrt(3))
  assert [summary["fedss"][f"{METRIC}_seed{s}"] for s in (0, 1, 2)] == list(fedss)
  assert summary["fedss"]["gap_to_same_reference"] == pytest.approx(fedss.mean() - 0.4851)
  assert summary["full_softmax"]["passes"] == 16.0
  # A seed-free row (the baseline, a reference trained alike): no spread.
  assert summary["most_frequent_labels"][f"{METRIC}_se"] == pytest.approx(0.0, abs=1e-12)
  assert "gap_to_same_reference" not in summary["most_frequent_labels"]
  table = seed_summary.markdown_table(list(summary.values()), METRIC, [0, 1, 2], False)
  assert "| run | precision@1 (%) mean ± SE | seed 0 | seed 1 | seed 2 |" in table
  assert "| fedss | 46.55 ± 0.92 | 46.62 | 48.11 | 44.93 | -1.96" in table


def test_one_seed_has_no_error_and_a_missing_run_is_named():
  [fedss] = [r for r in seed_summary.across_seeds({3: rows(0.5, 0.5, 0.5)}, METRIC)
             if r["run"] == "fedss"]
  assert fedss[METRIC] == 0.5 and math.isnan(fedss[f"{METRIC}_se"])
  with pytest.raises(ValueError, match="seed 1's comparison has 0 rows of full_softmax"):
    seed_summary.across_seeds({0: rows(0.5, 0.5, 0.5), 1: rows(0.5, 0.5, 0.5)[:2]}, METRIC)


@pytest.mark.runs_long
def test_compare_over_seeds_runs_each_seed_and_summarizes(tmp_path):
  flags = ["scripts.compare", "--task=xc", "--synthetic_xc=xc_tiny", "--rounds=2",
           "--clients_per_round=20", "--eval_every=1", "--patience=0", "--spreadout_k=3",
           "--algorithms=fedaws", "--nocentralized_references"]
  result = run_module(*flags, "--seeds=0,1", f"--output_dir={tmp_path}/out", timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  per_seed = {}
  for seed in (0, 1):
    with open(os.path.join(tmp_path, "out", f"seed_{seed}", "results.csv")) as f:
      per_seed[seed] = {r["run"]: float(r[METRIC]) for r in csv.DictReader(f)}
  assert per_seed[0]["fedaws"] != per_seed[1]["fedaws"]  # The seed reached the run.
  with open(os.path.join(tmp_path, "out", "results.csv")) as f:
    summary = {r["run"]: r for r in csv.DictReader(f)}
  assert float(summary["fedaws"][METRIC]) == pytest.approx(
      (per_seed[0]["fedaws"] + per_seed[1]["fedaws"]) / 2)
  assert summary["fedaws"]["seeds"] == "2"
  assert "[seed 1](seed_1/results.md)" in open(
      os.path.join(tmp_path, "out", "results.md")).read()
  # The same comparison at --seed=1 alone is the summary's seed 1.
  alone = run_module(*flags, "--seed=1", f"--output_dir={tmp_path}/alone", timeout=900)
  assert alone.returncode == 0, alone.stderr[-3000:]
  with open(os.path.join(tmp_path, "alone", "results.csv")) as f:
    assert {r["run"]: float(r[METRIC]) for r in csv.DictReader(f)} == per_seed[1]
  for bad_flags, message in ((["--seeds=0,x"], "--seeds: integers, got 0,x"),
                             (["--seeds=0,0"], "--seeds: each seed once, got 0,0"),
                             (["--seeds=0,1", "--seed=2"],
                              "--seeds runs the comparison at each of its seeds; drop --seed")):
    bad = run_module(*flags, *bad_flags, f"--output_dir={tmp_path}/bad")
    assert bad.returncode == 2 and bad.stderr.strip().endswith(f"error: {message}")
    assert not os.path.exists(tmp_path / "bad")
