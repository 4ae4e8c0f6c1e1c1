"""FedPU and its baselines over the paper's settings (paper 001, Tables 1-3).

Every (setting, method) pair is one run of the shared loop in
`output_dir/<setting>/<method>` (re-running resumes). Reports: `results.csv`
(setting, method, test accuracy, bytes per client, rounds), `results.md` (a
table with a row per setting and a column per method, as the paper's tables)
and `accuracy_curves.png` (validation accuracy against rounds, a panel per
setting).
"""

import csv
import dataclasses
import math
import os
from typing import Any, Dict, List, Sequence

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from fed_retrieval.reports import result_files
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import pu_training
from fed_retrieval.training import run_directory
from fed_retrieval.training.pu_training import PUFederatedConfig
from losses import pu_risk
from tasks.pu import pu_task

CSV_COLUMNS = ("setting", "method", "accuracy", "description", "majority_class_accuracy",
               "bytes_down_per_client",
               "bytes_up_per_client", "rounds", "best_round", "examples_seen",
               "worker_restarts")


def run_pu_comparison(task_config: pu_task.PUTaskConfig,
                      settings: Dict[str, pu_task.PUSetting], methods: Sequence[str],
                      config: PUFederatedConfig, output_dir: str
                      ) -> List[Dict[str, Any]]:
  """Runs (or resumes) every method on every setting; a row per run."""
  for method in methods:
    if method not in pu_risk.METHODS:
      raise ValueError(f"--methods: unknown method '{method}'; choose from "
                       f"{', '.join(pu_risk.METHODS)}")
  run_directory.lock_run_directory(output_dir)
  rows = []
  for name, setting in settings.items():
    task = pu_task.build_pu_task(dataclasses.replace(task_config, setting=setting))
    for method in methods:
      run_dir = os.path.join(output_dir, name, method)
      with tff_runtime.execution_context():
        results = pu_training.train_pu_federated(
            task, dataclasses.replace(config, method=method), run_dir)
      rows.append({"setting": name, "method": method, "description": setting.describe(),
                   "accuracy": results["test"]["accuracy"],
                   # From the task: runs made before results.json carried it.
                   "majority_class_accuracy":
                       pu_training.majority_class_baseline(task)["accuracy"],
                   **{k: results.get(k) for k in CSV_COLUMNS[5:]}, "run_dir": run_dir})
  return rows


def markdown_table(rows: Sequence[Dict[str, Any]]) -> str:
  """A row per setting, test accuracy (%) per method and of the majority
  class (the trivial baseline)."""
  methods = list(dict.fromkeys(r["method"] for r in rows))
  settings = list(dict.fromkeys(r["setting"] for r in rows))
  cell = {(r["setting"], r["method"]):
          f"{100 * r['accuracy']:.2f}{result_files.restarts_note(r)}" for r in rows}
  description = {r["setting"]: r["description"] for r in rows}
  majority = {r["setting"]: f"{100 * r['majority_class_accuracy']:.2f}" for r in rows}
  lines = ["| setting | " + " | ".join(methods) + " | majority class |",
           "|" + "---|" * (len(methods) + 2)]
  for setting in settings:
    cells = [cell.get((setting, m), "") for m in methods] + [majority[setting]]
    lines.append(f"| {setting} ({description[setting]}) | " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def _curve(run_dir: str) -> List[tuple]:
  with open(os.path.join(run_dir, "metrics.csv")) as f:
    return [(int(r["round"]), float(r["val_accuracy"])) for r in csv.DictReader(f)
            if r.get("val_accuracy")]


def plot_accuracy_curves(rows: Sequence[Dict[str, Any]], path: str) -> None:
  """Validation accuracy against rounds: a panel per setting, a line per method."""
  settings = list(dict.fromkeys(r["setting"] for r in rows))
  columns = min(len(settings), 2)
  figure, axes = plt.subplots(math.ceil(len(settings) / columns), columns,
                              figsize=(6 * columns, 4 * math.ceil(len(settings) / columns)),
                              squeeze=False)
  for panel, setting in zip(axes.flat, settings):
    for row in rows:
      if row["setting"] == setting:
        panel.plot(*zip(*_curve(row["run_dir"])), marker="o", markersize=2,
                   label=row["method"])
    panel.set_title(f"{setting}", fontsize=9)
    panel.set_xlabel("round")
    panel.set_ylabel("validation accuracy")
    panel.set_ylim(0, 1)
    panel.grid(alpha=0.3)
    panel.legend(fontsize=7)
  for panel in list(axes.flat)[len(settings):]:
    panel.axis("off")
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  plt.close(figure)


def write_reports(rows: Sequence[Dict[str, Any]], output_dir: str) -> str:
  """results.csv, results.md and accuracy_curves.png; returns the table."""
  table = markdown_table(rows)
  result_files.write_results(rows, CSV_COLUMNS, table, output_dir)
  plot_accuracy_curves(rows, os.path.join(output_dir, "accuracy_curves.png"))
  return table
