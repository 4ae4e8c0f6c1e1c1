"""The benchmark script's figures: present, positive and consistent (no timing targets)."""

import json

import pytest

from fed_retrieval.reports import throughput
from tests.script_runs import run_module


@pytest.mark.runs_long
@pytest.mark.parametrize("task_flags,workloads,trials", [
    (["--synthetic=small", "--losses=batch_softmax", "--local_workers=2", "--breakdown"],
     ["federated batch_softmax"], 1),
    (["--task=xc", "--synthetic_xc=xc_tiny", "--algorithms=fedss"],
     ["federated fedss"], 3),
])
def test_benchmark_reports_every_workload_against_the_tight_loop(tmp_path, task_flags,
                                                                 workloads, trials):
  output = tmp_path / "report.json"
  result = run_module(
      "scripts.benchmark", *task_flags, "--timed_rounds=1", "--warmup_rounds=1",
      "--clients_per_round=5", "--steps_per_execution=1", f"--repeats={trials}",
      f"--output={output}", *([f"--cache_dir={tmp_path}"] if "--task=xc" not in task_flags
                              else []))
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads(output.read_text())
  assert [row["workload"] for row in report["rows"]] == workloads
  for row in report["rows"]:
    assert f"| {row['workload']} |" in result.stdout  # The markdown table.
    for key in ("federated_examples_per_sec", "centralized_examples_per_sec",
                "tight_loop_examples_per_sec", "keras_sgd_tight_loop_examples_per_sec",
                "seconds_per_round"):
      assert row[key] > 0, key
    memory = row["federated_memory"]
    assert memory["processes"] >= 2  # Python and the TFF worker.
    assert 0 < memory["peak_rss_mb"] <= memory["peak_rss_mb_sum_of_high_water_marks"] + 1
    # Each trial's fractions are of its own figures; the row's the median.
    assert len(row["trials"]) == trials
    for trial in row["trials"]:
      assert trial["tight_loop_examples_per_sec"] == max(trial["tight_loop_by_xla"].values())
      assert trial["keras_sgd_tight_loop_examples_per_sec"] == max(
          trial["keras_sgd_tight_loop_by_xla"].values())
      assert trial["federated_fraction_of_tight_loop"] == pytest.approx(
          trial["federated_examples_per_sec"] / trial["tight_loop_examples_per_sec"],
          abs=1e-3)
    for key in ("federated_fraction_of_tight_loop", "centralized_fraction_of_tight_loop"):
      values = sorted(trial[key] for trial in row["trials"])
      assert row[key] == pytest.approx(values[len(values) // 2], abs=1e-3)
      assert row[key.replace("fraction", "fraction_range")] == [values[0], values[-1]]
      if trials > 1:
        assert f"{values[0]:.2f}-{values[-1]:.2f})" in result.stdout
    if "--local_workers=2" in task_flags:  # Clients split across two workers.
      assert row["seconds_per_round_by_local_workers"]["2"] > 0
      breakdown = row["round_breakdown"]
      assert breakdown["clients"] == 5 and breakdown["fixed_ms"] > 0
      assert set(breakdown) == {"clients", "fixed_ms", "per_client_ms", "per_batch_ms",
                                "datasets_ms"}
  assert report["min_federated_fraction_of_tight_loop"] == min(
      r["federated_fraction_of_tight_loop"] for r in report["rows"])


def test_the_report_keeps_each_workloads_row_and_the_smallest_fractions():
  """Of several workloads (the script runs one a loss or algorithm, as the
  comparison would): a table row each, in order, and the minima over them."""
  def row(name, federated, centralized):
    figures = {"workload": name, "federated_examples_per_sec": 1000.0,
               "centralized_examples_per_sec": 2000.0, "tight_loop_examples_per_sec": 4000.0,
               "keras_sgd_tight_loop_examples_per_sec": 3000.0, "seconds_per_round": 0.5,
               "federated_fraction_of_tight_loop": federated,
               "centralized_fraction_of_tight_loop": centralized,
               "centralized_fraction_of_keras_sgd_tight_loop": 0.7,
               "federated_memory": {"peak_rss_mb": 1500.0}, "trials": [{}, {}, {}]}
    for kind in ("federated", "centralized"):
      figures[f"{kind}_fraction_range_of_tight_loop"] = [0.1, 0.9]
    figures["centralized_fraction_range_of_keras_sgd_tight_loop"] = [0.6, 0.8]
    return figures

  rows = [row("federated a", 0.25, 0.5), row("federated b", 0.5, 0.375)]
  report = throughput.report(rows)
  assert report["rows"] == rows
  assert report["min_federated_fraction_of_tight_loop"] == 0.25
  assert report["min_centralized_fraction_of_tight_loop"] == 0.375
  table = throughput.markdown_table(rows).splitlines()
  assert [line.split(" | ")[0] for line in table[2:]] == ["| federated a", "| federated b"]
  assert table[2].startswith("| federated a | 1,000 | 2,000 | 4,000 | 3,000 | 0.25 (0.10-0.90) |")
