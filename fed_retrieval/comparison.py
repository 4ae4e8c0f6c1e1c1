"""Centralized vs federated training of each loss: runs, table and plot.

Budgets are matched by examples: each centralized run takes as many batches as
the federated run of the same loss trained on in total (rounds x sampled
clients' examples x local epochs, divided by the batch size), on the pooled
examples of the same training users, and is tested on the same test users.
"""

import csv
import dataclasses
import math
import os
from typing import Any, Dict, List, Sequence

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from fed_retrieval import centralized_training
from fed_retrieval import federated_training
from fed_retrieval import tff_runtime
from fed_retrieval.centralized_training import CentralizedConfig
from fed_retrieval.federated_process import FederatedConfig
from tasks import movielens_task

RECALL_KEYS = ("global_recall@1", "global_recall@5", "global_recall@10")
CSV_COLUMNS = ("setting", "loss") + RECALL_KEYS + (
    "drop_vs_centralized_same_loss@10", "drop_vs_best_centralized@10")


def run_comparison(task_config: movielens_task.TaskConfig, losses: Sequence[str],
                   federated: FederatedConfig, centralized_optimizer: str,
                   centralized_learning_rate: float, output_dir: str,
                   include_shuffled: bool = False,
                   embedding_dim: int = 16) -> List[Dict[str, Any]]:
  """Runs (or resumes) every run of the comparison; returns one row per run."""
  settings = {"federated": movielens_task.build_task(task_config)}
  if include_shuffled:
    settings["federated_shuffled"] = movielens_task.build_task(
        dataclasses.replace(task_config, shuffle_across_users=True))
  task = settings["federated"]
  rows = []
  for loss in losses:
    # --spreadout_weight is meant for the *_spreadout losses only.
    spreadout_weight = (federated.spreadout_weight
                        if loss.endswith("_spreadout") else None)
    config = dataclasses.replace(federated, loss=loss,
                                 spreadout_weight=spreadout_weight)
    federated_rows = []
    for setting, setting_task in settings.items():
      # The worker stops after each federated run: even idle it takes CPU
      # from the centralized run that follows.
      with tff_runtime.local_execution_context():
        results = federated_training.train_federated(
            setting_task, config, os.path.join(output_dir, f"{setting}_{loss}"),
            embedding_dim)
      federated_rows.append(_row(setting, loss, results, output_dir))
    budget = federated_rows[0]["examples_seen"]
    central = centralized_training.train_centralized(
        task, CentralizedConfig(
            loss=loss, spreadout_weight=spreadout_weight,
            temperature=federated.temperature, margin=federated.margin,
            batch_size=federated.batch_size,
            steps=math.ceil(budget / federated.batch_size),
            optimizer=centralized_optimizer,
            learning_rate=centralized_learning_rate, seed=federated.seed,
            split="user", ks=federated.ks),
        os.path.join(output_dir, f"centralized_{loss}"), embedding_dim)
    rows.append(_row("centralized", loss, central, output_dir))
    rows.extend(federated_rows)
    popularity = central["most_popular_baseline"]  # The same for every loss.
  rows.append({"setting": "baseline", "loss": "most_popular", **popularity})
  return with_relative_drops(rows)


def _row(setting: str, loss: str, results: Dict[str, Any], output_dir: str):
  return {"setting": setting, "loss": loss, **results["test"],
          "examples_seen": results["examples_seen"],
          "run_dir": os.path.join(output_dir, f"{setting}_{loss}")}


def with_relative_drops(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """Adds, to federated rows, the relative drop of recall@10 vs centralized."""
  central = {r["loss"]: r["global_recall@10"] for r in rows
             if r["setting"] == "centralized"}
  best = max(central.values())
  for row in rows:
    if row["setting"].startswith("federated"):
      reference = central[row["loss"]]
      row["drop_vs_centralized_same_loss@10"] = (
          (reference - row["global_recall@10"]) / reference if reference else math.nan)
      row["drop_vs_best_centralized@10"] = (best - row["global_recall@10"]) / best
  return rows


def write_csv(rows: Sequence[Dict[str, Any]], path: str) -> None:
  with open(path, "w", newline="") as f:
    writer = csv.DictWriter(f, CSV_COLUMNS, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
      writer.writerow({k: row.get(k, "") for k in CSV_COLUMNS})


def markdown_table(rows: Sequence[Dict[str, Any]]) -> str:
  header = ("| setting | loss | recall@1 | recall@5 | recall@10 | drop vs same loss "
            "| drop vs best centralized |")
  lines = [header, "|" + "---|" * 7]
  percent = lambda v: "" if v is None or v == "" else f"{100 * v:.2f}%"
  for row in rows:
    lines.append("| " + " | ".join([
        row["setting"], row["loss"], *(percent(row[k]) for k in RECALL_KEYS),
        percent(row.get("drop_vs_centralized_same_loss@10")),
        percent(row.get("drop_vs_best_centralized@10"))]) + " |")
  return "\n".join(lines) + "\n"


def plot_recall_vs_rounds(rows: Sequence[Dict[str, Any]], path: str) -> None:
  """Validation global recall@10 per round of every federated run, with the
  centralized test levels of the same losses as dashed lines."""
  figure, axes = plt.subplots(figsize=(8, 5))
  colors = {}
  for row in rows:
    if not row["setting"].startswith("federated"):
      continue
    rounds, recalls = [], []
    with open(os.path.join(row["run_dir"], "metrics.csv")) as f:
      for record in csv.DictReader(f):
        if record.get("val_global_recall@10"):
          rounds.append(int(record["round"]))
          recalls.append(float(record["val_global_recall@10"]))
    style = "-" if row["setting"] == "federated" else ":"
    line, = axes.plot(rounds, recalls, style, marker="o", markersize=3,
                      color=colors.get(row["loss"]),
                      label=f"{row['setting']} {row['loss']}")
    colors[row["loss"]] = line.get_color()
  for row in rows:
    if row["setting"] == "centralized":
      axes.axhline(row["global_recall@10"], linestyle="--",
                   color=colors.get(row["loss"], "gray"),
                   label=f"centralized {row['loss']} (test)")
    elif row["setting"] == "baseline":
      axes.axhline(row["global_recall@10"], linestyle="-.", color="black",
                   label="most popular (test)")
  axes.set_xlabel("round")
  axes.set_ylabel("global recall@10 (validation users)")
  axes.set_title("Federated vs centralized dual-encoder retrieval")
  axes.legend(fontsize=7, loc="best")
  axes.grid(alpha=0.3)
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)


def write_reports(rows: Sequence[Dict[str, Any]], output_dir: str) -> str:
  """results.csv, results.md and recall_vs_rounds.png; returns the table."""
  write_csv(rows, os.path.join(output_dir, "results.csv"))
  table = markdown_table(rows)
  with open(os.path.join(output_dir, "results.md"), "w") as f:
    f.write(table)
  plot_recall_vs_rounds(rows, os.path.join(output_dir, "recall_vs_rounds.png"))
  return table
