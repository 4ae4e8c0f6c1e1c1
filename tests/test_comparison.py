"""The comparison's relative drops, CSV, Markdown table and plot; and compare.py."""

import csv
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from fed_retrieval.algorithms.differential_privacy import DPConfig
from fed_retrieval.evaluation import user_bootstrap
from fed_retrieval.reports import comparison
from fed_retrieval.training.centralized_loop import CentralizedConfig
from fed_retrieval.training.federated_loop import FederatedConfig
from tasks.movielens import sequence_examples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fake_run(tmp_path, name, recalls):
  run_dir = os.path.join(tmp_path, name)
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
    f.write("round,examples_seen,train_loss,val_global_recall@10\n")
    for round_num, recall in enumerate(recalls, start=1):
      f.write(f"{round_num},{1000 * round_num},1.0,"
              f"{recall if recall is not None else ''}\n")
  return run_dir


def rows(tmp_path):
  result = []
  for setting, loss, r10 in [("centralized", "batch_softmax", 0.10),
                             ("federated", "batch_softmax", 0.04),
                             ("centralized", "global_softmax", 0.20),
                             ("federated", "global_softmax", 0.19),
                             ("federated_shuffled", "global_softmax", 0.21)]:
    used = ({"examples_seen": 1_500_000, "steps": 93_750, "best_step": 80_000}
            if setting == "centralized" else
            {"examples_seen": 733_000, "rounds": 45, "best_round": 40})
    result.append({"setting": setting, "loss": loss, "global_recall@1": r10 / 5,
                   "global_recall@5": r10 / 2, "global_recall@10": r10, **used,
                   "run_dir": fake_run(tmp_path, f"{setting}_{loss}",
                                       [None, r10 / 2, None, r10])})
  result.append({"setting": "baseline", "loss": "most_popular", "global_recall@1": 0.0,
                 "global_recall@5": 0.01, "global_recall@10": 0.02})
  return comparison.with_relative_drops(result)


def test_relative_drops(tmp_path):
  by_key = {(r["setting"], r["loss"]): r for r in rows(tmp_path)}
  federated_bs = by_key[("federated", "batch_softmax")]
  assert federated_bs["drop_vs_centralized_same_loss@10"] == pytest.approx(0.6)
  assert federated_bs["drop_vs_best_centralized@10"] == pytest.approx(0.8)
  shuffled = by_key[("federated_shuffled", "global_softmax")]
  assert shuffled["drop_vs_centralized_same_loss@10"] == pytest.approx(-0.05)
  assert "drop_vs_centralized_same_loss@10" not in by_key[("centralized", "batch_softmax")]


def test_reports(tmp_path):
  table = comparison.write_reports(rows(tmp_path), str(tmp_path))
  with open(os.path.join(tmp_path, "results.csv")) as f:
    records = list(csv.DictReader(f))
  assert tuple(records[0]) == comparison.CSV_COLUMNS
  assert [r["setting"] for r in records] == ["centralized", "federated", "centralized",
                                             "federated", "federated_shuffled",
                                             "baseline"]
  assert float(records[1]["drop_vs_centralized_same_loss@10"]) == pytest.approx(0.6)
  assert records[0]["drop_vs_centralized_same_loss@10"] == ""
  assert (records[1]["examples_seen"], records[1]["rounds"], records[1]["best_round"],
          records[1]["steps"]) == ("733000", "45", "40", "")
  assert (records[0]["steps"], records[0]["best_step"], records[0]["rounds"]) == (
      "93750", "80000", "")
  assert ("| federated | batch_softmax | 0.80% | 2.00% | 4.00% | 60.00% | 80.00% "
          "| 733k ex, 45 rounds (best 40) |") in table
  assert "| 1.50M ex, 93750 steps (best 80000) |" in table
  with open(os.path.join(tmp_path, "results.md")) as f:
    assert f.read() == table
  with open(os.path.join(tmp_path, "recall_curves.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_standard_errors_from_test_hits(tmp_path):
  table_rows = rows(tmp_path)
  rng = np.random.default_rng(0)
  users = np.repeat(np.arange(20), 30)
  hits = [rng.random(users.size) < row["global_recall@10"] for row in table_rows]
  with_errors = comparison.with_standard_errors(table_rows, hits, users)
  federated_bs, central_gs = with_errors[1], with_errors[2]
  assert federated_bs["drop_vs_centralized_same_loss@10_se"] == (
      user_bootstrap.relative_drop(hits[0], hits[1], users)[1])
  # The best centralized run is the one with the most test hits: global softmax.
  assert federated_bs["drop_vs_best_centralized@10_se"] == (
      user_bootstrap.relative_drop(hits[2], hits[1], users)[1])
  assert central_gs["global_recall@10_se"] == user_bootstrap.recall_standard_error(
      hits[2], users)
  assert "drop_vs_centralized_same_loss@10_se" not in central_gs
  assert 0 < with_errors[-1]["global_recall@10_se"] < 0.05  # The baseline's.
  table = comparison.markdown_table(with_errors)
  assert f"| 20.00% ± {100 * central_gs['global_recall@10_se']:.2f} |" in table
  assert f"60.00% ± {100 * federated_bs['drop_vs_centralized_same_loss@10_se']:.2f}" in table


def test_dp_rows_carry_their_epsilon():
  rows = [{"setting": "federated", "loss": "global_softmax", "global_recall@1": 0.01,
           "global_recall@5": 0.03, "global_recall@10": 0.05},
          {"setting": "federated_dp1", "loss": "global_softmax", "global_recall@1": 0.01,
           "global_recall@5": 0.02, "global_recall@10": 0.04, "epsilon": 3.456,
           "target_delta": 1e-5}]
  table = comparison.markdown_table(rows)
  assert table.splitlines()[0].endswith("| epsilon (delta) |")
  assert table.splitlines()[3].endswith("| 3.46 (1e-05) |")
  assert table.splitlines()[2].endswith("|  |  |  |")  # No DP: no epsilon.
  assert "epsilon" not in comparison.markdown_table(rows[:1])
  settings = comparison.federated_settings(False, False, [DPConfig(noise_multiplier=0.5)])
  assert settings["federated_dp0.5"] == ({}, {"dp": DPConfig(noise_multiplier=0.5)})


def test_centralized_runs_are_evaluated_and_capped_on_the_federated_clock():
  counts = [10, 40, 100]
  users = np.repeat([1, 2, 3], counts)
  task = types.SimpleNamespace(federated_train=sequence_examples.Examples(
      users, np.zeros((users.size, 2), np.int32), np.ones(users.size, np.int32)))
  federated = FederatedConfig(clients_per_round=2, max_local_steps=2, eval_every=5,
                              rounds=31)
  # A round: 2 clients of the mean of min(n, 2 * 16) = (10 + 32 + 32) / 3 examples.
  per_round = 2 * 74 / 3
  assert comparison.federated_examples_per_round(task, federated) == pytest.approx(
      per_round)
  matched = comparison.with_federated_schedule(
      CentralizedConfig(epochs=None), task, federated)
  assert matched.eval_every_steps == round(5 * per_round / 16) == 15
  assert matched.steps == round(31 * per_round / 16) == 96
  given = comparison.with_federated_schedule(
      CentralizedConfig(epochs=3, eval_every_steps=7), task, federated)
  assert (given.epochs, given.steps, given.eval_every_steps) == (3, None, 7)


def test_compare_script_end_to_end(tmp_path):
  """Converged budget with both controls; the runs stop by patience or caps."""
  result = subprocess.run(
      [sys.executable, "-m", "scripts.compare", "--synthetic=small",
       "--losses=batch_softmax,hinge_spreadout", "--rounds=4", "--clients_per_round=5",
       "--eval_every=1", "--patience=1", "--centralized_eval_every_steps=100",
       "--centralized_max_epochs=1", "--include_shuffled", "--include_fedsgd",
       "--noise_multipliers=1", "--clip_norm=0.5",
       f"--output_dir={tmp_path}/cmp", f"--cache_dir={tmp_path}/cache"],
      cwd=ROOT, capture_output=True, text=True, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "| federated_shuffled | hinge_spreadout |" in result.stdout
  assert "| federated_sgd | batch_softmax |" in result.stdout
  assert "WARNING" not in result.stderr and "fork" not in result.stderr
  with open(os.path.join(tmp_path, "cmp", "results.csv")) as f:
    records = list(csv.DictReader(f))
  assert [(r["setting"], r["loss"]) for r in records] == [
      ("centralized", "batch_softmax"), ("federated", "batch_softmax"),
      ("federated_shuffled", "batch_softmax"), ("federated_sgd", "batch_softmax"),
      ("federated_dp1", "batch_softmax"),
      ("centralized", "hinge_spreadout"), ("federated", "hinge_spreadout"),
      ("federated_shuffled", "hinge_spreadout"), ("federated_sgd", "hinge_spreadout"),
      ("federated_dp1", "hinge_spreadout"), ("baseline", "most_popular")]
  assert all(float(r["epsilon"]) > 0 for r in records if r["setting"] == "federated_dp1")
  assert all(r["epsilon"] == "" for r in records if r["setting"] != "federated_dp1")
  for record in records[:-1]:
    if record["setting"] == "centralized":
      assert int(record["best_step"]) <= int(record["steps"])
      assert int(record["examples_seen"]) == 16 * int(record["steps"])
    else:
      assert 1 <= int(record["best_round"]) <= int(record["rounds"]) <= 4
      # Patience 1: a run that stopped early did so one evaluation after its best.
      assert int(record["rounds"]) in (4, int(record["best_round"]) + 1)
  for name in ("results.md", "recall_curves.png"):
    assert os.path.getsize(os.path.join(tmp_path, "cmp", name)) > 0
