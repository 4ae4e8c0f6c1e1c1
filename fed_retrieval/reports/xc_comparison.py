"""FedAwS, FedSS and their baselines on one XC task (papers 000 and 003),
read against centralized references and a trivial baseline.

Every algorithm is trained with the shared loop (converged by validation
precision@1, or a fixed --rounds with patience 0) on the same clients, and
tested on the same points. Beside them, the centralized references
(`xc_training.train_xc_centralized`): the same tower and class table trained
with full softmax on the pooled examples of one label a point
(`centralized_one_label`, the FedAwS paper's protocol) and of every label
(`centralized_all_labels`), each until the same stopping rule ends it. Each
federated row carries its P@1 gap to the reference of its clients' label
assignment and to the best reference.
Reports: `results.csv` (one row per run, and `most_frequent_labels`: the 5
labels most frequent among *all* training labels, the same for every point),
`results.md` (P@1/3/5, or MAP@R among held-out classes; gaps; bytes per
client per round; examples trained on), `precision_curves.png` (validation
P@1 against examples trained on) and `quality_vs_bytes.png` (test P@1
against MB per client per round).
"""

import csv
import dataclasses
import math
import os
from typing import Any, Dict, List, Optional, Sequence

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from fed_retrieval.evaluation import units
from fed_retrieval.reports import communication
from fed_retrieval.reports import result_files
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import run_directory
from fed_retrieval.training import validation_curve
from fed_retrieval.training import xc_training
from fed_retrieval.training.xc_training import XCCentralizedConfig
from fed_retrieval.training.xc_training import XCFederatedConfig
from tasks.xc import xc_task

GAP_KEYS = ("p@1_gap_to_centralized_same_labels", "p@1_gap_to_best_centralized")
CSV_COLUMNS = ("algorithm", "precision@1", "precision@1_se", "precision@3",
               "precision@5", "recall@5", "map@r", "map@r_se", "recall@1", *GAP_KEYS,
               *(f"{key}_se" for key in GAP_KEYS), "bytes_down_per_client",
               "bytes_up_per_client", "mean_real_bytes_down_per_client",
               "mean_real_bytes_up_per_client", "rounds", "best_round", "steps", "best_step",
               "passes", "best_passes", "examples_seen", "worker_restarts")
RUN_COLUMNS = ("bytes_down_per_client", "bytes_up_per_client",
               "mean_real_bytes_down_per_client", "mean_real_bytes_up_per_client",
               "rounds", "best_round", "steps", "best_step", "passes", "best_passes",
               "examples_seen", "worker_restarts")
REFERENCE = "most_frequent_labels"


def _row(name: str, results: Dict[str, Any], run_dir: str) -> Dict[str, Any]:
  return {"algorithm": name, **results["test"],
          **{k: results[k] for k in RUN_COLUMNS if k in results}, "run_dir": run_dir}


def default_references_dir(output_dir: str) -> str:
  """Where a comparison's centralized references live unless told: `references/`
  beside its output directory, shared by the comparisons there."""
  return os.path.join(os.path.dirname(os.path.abspath(output_dir)), "references")


def run_xc_comparison(task_config: xc_task.XCTaskConfig, algorithms: Sequence[str],
                      config: XCFederatedConfig, output_dir: str,
                      centralized: Optional[XCCentralizedConfig] = None,
                      references_dir: Optional[str] = None) -> List[Dict[str, Any]]:
  """Runs (or resumes) the centralized references (unless `centralized` is
  None) and each algorithm; one row per run plus the trivial baseline.

  A reference is trained once for every comparison on the same points and
  settings: in `references_dir` (default `default_references_dir`), under a
  name that hashes its run config, linked from `output_dir`.
  """
  for algorithm in algorithms:
    if algorithm not in xc_training.ALGORITHMS:
      raise ValueError(f"--algorithms: '{algorithm}' is not one of "
                       f"{', '.join(xc_training.ALGORITHMS)}")
  run_directory.lock_run_directory(output_dir)
  task = xc_task.build_xc_task(task_config)
  rows = []
  assignments = (xc_task.LABEL_ASSIGNMENTS
                 if centralized and task_config.class_split == "points" else ())
  for assignment in assignments:  # Unseen test classes: no softmax reference.
    name = xc_training.CENTRALIZED_SETTINGS[assignment]
    reference = dataclasses.replace(centralized, label_assignment=assignment)
    run_dir = run_directory.shared_run_directory(
        references_dir or default_references_dir(output_dir), name,
        xc_training.reference_run_config(task, xc_training.model_config_for(task, config),
                                         reference))
    results = xc_training.train_xc_centralized(task, config, reference, run_dir)
    run_directory.link(run_dir, os.path.join(output_dir, name))
    rows.append(_row(name, results, run_dir))
  for algorithm in algorithms:
    run_config = dataclasses.replace(config, algorithm=algorithm)
    with tff_runtime.execution_context():
      results = xc_training.train_xc_federated(
          task, run_config, os.path.join(output_dir, algorithm))
    rows.append(_row(algorithm, results, os.path.join(output_dir, algorithm)))
  if task_config.class_split == "points":  # Unseen test classes have no frequency.
    rows.append({"algorithm": REFERENCE,
                 **xc_training.most_frequent_labels_baseline(task, config.ks)})
  return with_gaps(rows, xc_training.CENTRALIZED_SETTINGS[task_config.label_assignment])


def with_gaps(rows: List[Dict[str, Any]], same_labels: str) -> List[Dict[str, Any]]:
  """Adds to each federated row its P@1 minus the centralized references'
  (the one named `same_labels`, and the best), in points of a fraction, with
  standard errors paired over the test points where the runs saved their
  test units."""
  central = {r["algorithm"]: r for r in rows
             if r["algorithm"] in xc_training.CENTRALIZED_SETTINGS.values()}
  if not central:
    return rows
  best = max(central.values(), key=lambda r: r["precision@1"])
  for row in rows:
    if row["algorithm"] not in xc_training.ALGORITHMS:
      continue
    for key, reference in zip(GAP_KEYS, (central.get(same_labels), best)):
      if reference is None:
        row[key] = math.nan
        continue
      row[key] = row["precision@1"] - reference["precision@1"]
      row[f"{key}_se"] = _paired_standard_error(row, reference)
  return rows


def _paired_standard_error(row: Dict[str, Any], reference: Dict[str, Any]) -> float:
  """The standard error of the row's P@1 minus the reference's, paired over
  the test points (NaN for runs made before they saved their test units)."""
  paths = [os.path.join(r.get("run_dir", ""), validation_curve.TEST_UNITS)
           for r in (row, reference)]
  if not all(os.path.isfile(path) for path in paths):
    return math.nan
  return units.paired_gain(*(validation_curve.read_test_units(r["run_dir"])
                             for r in (row, reference)))[1]


def quality_metric(rows: Sequence[Dict[str, Any]]) -> str:
  """precision@1, or map@r when the test classes were held out of training."""
  return "precision@1" if "precision@1" in rows[0] else "map@r"


def _trained_on(row: Dict[str, Any]) -> str:
  """'11.6 passes (best 9.8), 150 rounds, 11.6k ex' or '... 3000 steps ...'."""
  if "examples_seen" not in row:
    return ""
  text = (f"{row['passes']:.1f} passes (best {row['best_passes']:.1f}), "
          if "passes" in row else "")
  if "rounds" in row:
    text += f"{row['rounds']} rounds"
  else:
    text += f"{row['steps']} steps"
  return (text + f", {row['examples_seen'] / 1e3:.1f}k ex" +
          result_files.restarts_note(row))


def markdown_table(rows: Sequence[Dict[str, Any]]) -> str:
  metrics = ((("precision@1", "P@1 ± SE"), ("precision@3", "P@3"), ("precision@5", "P@5"))
             if quality_metric(rows) == "precision@1"
             else (("map@r", "MAP@R ± SE"), ("recall@1", "R@1")))
  gaps = any("p@1_gap_to_best_centralized" in row for row in rows)
  header = ["algorithm", *(title for _, title in metrics)]
  if gaps:
    header += ["P@1 vs centralized, same labels ± SE", "P@1 vs best centralized ± SE"]
  header += ["MB down / client / round (largest)", "MB up (largest)",
             "MB down (mean, as deployed)", "trained on"]
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for row in rows:
    cells = [row["algorithm"], *(_percent(row, key) for key, _ in metrics)]
    if gaps:
      cells += [_percent(row, key, "+") for key in GAP_KEYS]
    cells += [communication.megabytes(row.get("bytes_down_per_client")),
              communication.megabytes(row.get("bytes_up_per_client")),
              communication.megabytes(row.get("mean_real_bytes_down_per_client")),
              _trained_on(row)]
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def _percent(row: Dict[str, Any], key: str, sign: str = "") -> str:
  """'55.96' or '55.96 ± 1.11' (points of a fraction), '' where absent."""
  empty = lambda v: v is None or v == "" or math.isnan(v)
  value, error = row.get(key), row.get(f"{key}_se")
  if empty(value):
    return ""
  return f"{100 * value:{sign}.2f}" + ("" if empty(error) else f" ± {100 * error:.2f}")


def plot_precision_curves(rows: Sequence[Dict[str, Any]], path: str) -> None:
  """Validation P@1 (or MAP@R) of every run against the examples it had
  trained on: federated solid, centralized dashed, the baseline dash-dotted."""
  metric = quality_metric(rows)
  figure, axes = plt.subplots(figsize=(8, 5))
  for row in rows:
    if "run_dir" not in row:
      axes.axhline(100 * row[metric], linestyle="-.", color="black",
                   label=f"{row['algorithm']} (test)")
      continue
    with open(os.path.join(row["run_dir"], "metrics.csv")) as f:
      points = [(float(r["examples_seen"]) / 1e3, 100 * float(r[f"val_{metric}"]))
                for r in csv.DictReader(f) if r.get(f"val_{metric}")]
    style = "--" if row["algorithm"].startswith("centralized") else "-"
    axes.plot(*zip(*points), style, marker="o", markersize=2, label=row["algorithm"])
  axes.set_xscale("log")
  axes.set_xlabel("training examples seen (thousands)")
  axes.set_ylabel(f"{metric} (%, validation points)")
  axes.set_title("FedAwS, FedSS and baselines against centralized references")
  axes.legend(fontsize=8)
  axes.grid(alpha=0.3, which="both")
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)


def write_reports(rows: Sequence[Dict[str, Any]], output_dir: str) -> str:
  table = markdown_table(rows)
  result_files.write_results(rows, CSV_COLUMNS, table, output_dir)
  plot_precision_curves(rows, os.path.join(output_dir, "precision_curves.png"))
  communication.plot_quality_vs_bytes(
      [r for r in rows if r.get("bytes_down_per_client") is not None],
      lambda r: r["algorithm"], quality_metric(rows),
      os.path.join(output_dir, "quality_vs_bytes.png"))
  return table
