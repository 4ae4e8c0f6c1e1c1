"""Centralized vs federated training of each loss: runs, table and plot.

Budgets (`budget`):
- `converged` (default): every run trains until its validation recall@10 has
  not improved for `patience` evaluations (or its cap), and reports the model
  of its best evaluation (`early_stopping`), as the paper compares converged
  models. The table says how many examples (and rounds or steps) each used.
- `matched`: each federated run trains its `rounds`; each centralized run
  then takes as many batches as the federated run of its loss trained on in
  total, and both report their final model.
Centralized runs train on the pooled examples of the federated training users
and are validated and tested on the same users as the federated runs.
Controls, when asked: the IID `federated_shuffled` run (examples dealt to
users at random, counts kept) and `federated_sgd` (FedSGD: one step per round);
and client-level DP runs, `federated_dp<z>` for each noise multiplier z, whose
rows carry the epsilon of the reported model (the privacy-utility trade-off).
FedSS runs, when asked (`sampled_softmax_algorithms`): sampled global softmax
and its baselines (`sampled_softmax_training`), rows `federated_<algorithm>`.
Every federated row carries the bytes a client downloads and uploads per round;
`quality_vs_bytes.png` plots test recall@10 against them.
Test recall@10 and the federated rows' drops carry standard errors from a
bootstrap over the test users (`user_bootstrap`; the drops' paired: every
model is scored on the same draws), from each run's export.
"""

import csv
import dataclasses
import math
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from fed_retrieval import export
from fed_retrieval.algorithms.differential_privacy import DPConfig
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.evaluation import retrieval_evaluation
from fed_retrieval.evaluation import units
from fed_retrieval.evaluation import user_bootstrap
from fed_retrieval.reports import communication
from fed_retrieval.reports import result_files
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import centralized_loop
from fed_retrieval.training import federated_loop
from fed_retrieval.training import run_directory
from fed_retrieval.training import sampled_softmax_training
from fed_retrieval.training.centralized_loop import CentralizedConfig
from fed_retrieval.training.federated_loop import FederatedConfig
from tasks.movielens import movielens_task

BUDGETS = ("converged", "matched")
RECALL_KEYS = ("global_recall@1", "global_recall@5", "global_recall@10")
DROP_KEYS = ("drop_vs_centralized_same_loss@10", "drop_vs_best_centralized@10")
STANDARD_ERROR_KEYS = ("global_recall@10",) + DROP_KEYS
CSV_COLUMNS = ("setting", "loss") + RECALL_KEYS + (
    "examples_seen", "rounds", "best_round", "steps", "best_step") + DROP_KEYS + tuple(
        f"{key}_se" for key in STANDARD_ERROR_KEYS) + (
    "bytes_down_per_client", "bytes_up_per_client", "worker_restarts", "epsilon",
    "target_delta")


def federated_settings(include_shuffled: bool, include_fedsgd: bool,
                       dp_configs: Sequence[DPConfig] = ()
                       ) -> Dict[str, Tuple[Dict[str, Any], Dict[str, Any]]]:
  """Setting name -> (task changes, federated config changes)."""
  settings = {"federated": ({}, {})}
  if include_shuffled:
    settings["federated_shuffled"] = ({"shuffle_across_users": True}, {})
  if include_fedsgd:
    settings["federated_sgd"] = ({}, {"algorithm": "fedsgd"})
  for dp in dp_configs:
    settings[f"federated_dp{dp.noise_multiplier:g}"] = ({}, {"dp": dp})
  return settings


def federated_examples_per_round(task: movielens_task.MovieLensTask,
                                 federated: FederatedConfig) -> float:
  """The examples a federated round trains on, on average: its clients' local
  epochs, each client capped at `max_local_steps` batches."""
  per_user = np.array([stop - start for start, stop in
                       task.federated_train.user_ranges().values()])
  per_user = per_user * federated.local_epochs
  if federated.max_local_steps is not None:
    per_user = np.minimum(per_user, federated.max_local_steps * federated.batch_size)
  return float(per_user.mean()) * min(federated.clients_per_round, per_user.size)


def with_federated_schedule(centralized: CentralizedConfig,
                            task: movielens_task.MovieLensTask,
                            federated: FederatedConfig) -> CentralizedConfig:
  """The centralized runs on the federated runs' clock, where not set: an
  evaluation every as many examples as `eval_every` federated rounds train on
  (so patience means as many examples in both settings), no stop before as
  many examples as the federated minimum budget, and, without an `epochs`
  cap, a cap of as many examples as the federated cap."""
  per_round = federated_examples_per_round(task, federated)
  steps = lambda rounds: max(1, round(rounds * per_round / centralized.batch_size))
  cap, minimum = federated_loop.round_budget(federated,
                                             task.federated_train.num_users)
  changes = {"min_passes": minimum * per_round / len(task.federated_train)}
  if centralized.eval_every_steps is None:
    changes["eval_every_steps"] = steps(federated.eval_every)
  if centralized.epochs is None and centralized.steps is None:
    changes["steps"] = steps(cap)
  return dataclasses.replace(centralized, **changes)


def run_comparison(task_config: movielens_task.TaskConfig, losses: Sequence[str],
                   federated: FederatedConfig, centralized: CentralizedConfig,
                   output_dir: str, budget: str = "converged",
                   include_shuffled: bool = False, include_fedsgd: bool = False,
                   embedding_dim: int = 16,
                   sampled_softmax_algorithms: Sequence[str] = (),
                   fedss: Optional[FedSSConfig] = None,
                   dp_configs: Sequence[DPConfig] = ()) -> List[Dict[str, Any]]:
  """Runs (or resumes) every run of the comparison; returns one row per run.

  `federated` and `centralized` give everything but the loss (and, for the
  matched budget, the patience and the centralized steps); `fedss` the client
  and server optimization of the sampled-softmax runs.
  """
  if budget not in BUDGETS:
    raise ValueError(f"--budget must be one of {', '.join(BUDGETS)}, got '{budget}'")
  run_directory.lock_run_directory(output_dir)
  if budget == "matched":
    federated = dataclasses.replace(federated, patience=0)
    # Equal chunks of at most one pass, so the budget is overshot by < 1 step
    # per chunk (fixed-size evaluation chunks would round it up to a chunk).
    centralized = dataclasses.replace(centralized, patience=0, eval_every_steps=None)
  centralized = dataclasses.replace(centralized, split="user",
                                    batch_size=federated.batch_size,
                                    seed=federated.seed, ks=federated.ks)
  tasks = {}
  rows = []
  for loss in losses:
    objective = federated.objective.for_loss(loss)
    federated_rows = []
    for setting, (task_changes, config_changes) in federated_settings(
        include_shuffled, include_fedsgd, dp_configs).items():
      key = tuple(sorted(task_changes.items()))
      if key not in tasks:
        tasks[key] = movielens_task.build_task(
            dataclasses.replace(task_config, **task_changes))
      config = dataclasses.replace(federated, objective=objective, **config_changes)
      # The worker stops after each federated run: even idle it takes CPU
      # from the centralized run that follows.
      with tff_runtime.execution_context():
        results = federated_loop.train_federated(
            tasks[key], config, os.path.join(output_dir, f"{setting}_{loss}"),
            embedding_dim)
      federated_rows.append(_row(setting, loss, results, output_dir))
    config = dataclasses.replace(centralized, objective=objective)
    if budget == "matched":
      config = dataclasses.replace(config, steps=math.ceil(
          federated_rows[0]["examples_seen"] / federated.batch_size))
    else:
      config = with_federated_schedule(config, tasks[()], federated)
    central = centralized_loop.train_centralized(
        tasks[()], config, os.path.join(output_dir, f"centralized_{loss}"),
        embedding_dim)
    rows.append(_row("centralized", loss, central, output_dir))
    rows.extend(federated_rows)
  if () not in tasks:  # No loss runs: the FedSS runs and the baseline need it.
    tasks[()] = movielens_task.build_task(task_config)
  for algorithm in sampled_softmax_algorithms:
    with tff_runtime.execution_context():
      results = sampled_softmax_training.train_sampled_softmax(
          tasks[()], federated,
          dataclasses.replace(fedss or FedSSConfig(), algorithm=algorithm),
          os.path.join(output_dir, f"federated_{algorithm}_global_softmax"),
          embedding_dim)
    rows.append(_row(f"federated_{algorithm}", sampled_softmax_training.LOSS, results,
                     output_dir))
  task = tasks[()]
  popularity_score_fn = retrieval_evaluation.popularity_score_fn(
      task.federated_train, task.vocabulary_size)
  popularity, _ = units.split_units(retrieval_evaluation.evaluate(
      popularity_score_fn, task.federated_test, federated.ks, federated.batch_size))
  rows.append({"setting": "baseline", "loss": "most_popular", **popularity})
  hits = [test_hits(row, task, popularity_score_fn) for row in rows]
  return with_standard_errors(with_relative_drops(rows), hits,
                              task.federated_test.user_ids)


def _row(setting: str, loss: str, results: Dict[str, Any], output_dir: str):
  keys = ("examples_seen", "rounds", "best_round", "steps", "best_step",
          "bytes_down_per_client", "bytes_up_per_client",
          "mean_real_bytes_down_per_client", "worker_restarts", "epsilon",
          "target_delta")
  return {"setting": setting, "loss": loss, **results["test"],
          **{k: results[k] for k in keys if k in results},
          "run_dir": os.path.join(output_dir, f"{setting}_{loss}")}


def with_relative_drops(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
  """Adds, to federated rows, the relative drop of recall@10 vs centralized."""
  central = {r["loss"]: r["global_recall@10"] for r in rows
             if r["setting"] == "centralized"}
  best = max(central.values(), default=math.nan)
  for row in rows:
    if row["setting"].startswith("federated"):
      reference = central.get(row["loss"], math.nan)
      row["drop_vs_centralized_same_loss@10"] = (
          (reference - row["global_recall@10"]) / reference if reference else math.nan)
      row["drop_vs_best_centralized@10"] = (
          (best - row["global_recall@10"]) / best if best else math.nan)
  return rows


def test_hits(row: Dict[str, Any], task: movielens_task.MovieLensTask,
              baseline_score_fn: retrieval_evaluation.ScoreFn, k: int = 10
              ) -> np.ndarray:
  """Whether the row's model (its run's export; the baseline's scores) ranks
  each test example's item within `k` [N], in the test examples' order."""
  score_fn = (baseline_score_fn if row["setting"] == "baseline" else
              export.load_export(os.path.join(row["run_dir"], "export"),
                                 task.items).scores)
  return retrieval_evaluation.example_global_ranks(score_fn, task.federated_test) < k


def with_standard_errors(rows: List[Dict[str, Any]], hits: Sequence[np.ndarray],
                         user_ids: np.ndarray) -> List[Dict[str, Any]]:
  """Adds the user-bootstrap standard error of every row's recall@10 and of the
  federated rows' drops (`<key>_se`); `hits[i]` are row i's test hits@10."""
  central = {r["loss"]: h for r, h in zip(rows, hits) if r["setting"] == "centralized"}
  best = max(central, key=lambda loss: central[loss].mean(), default=None)
  for row, row_hits in zip(rows, hits):
    row["global_recall@10_se"] = user_bootstrap.recall_standard_error(row_hits,
                                                                      user_ids)
    if not row["setting"].startswith("federated"):
      continue
    for key, reference in zip(DROP_KEYS, (row["loss"], best)):
      if reference in central:
        row[f"{key}_se"] = user_bootstrap.relative_drop(central[reference], row_hits,
                                                        user_ids)[1]
  return rows


def _budget_used(row: Dict[str, Any]) -> str:
  """'733k ex, 45 rounds (best 40)' or '1.2M ex, 75k steps (best 60k)'."""
  if row.get("examples_seen") in (None, ""):
    return ""
  examples = row["examples_seen"]
  text = (f"{examples / 1e6:.2f}M ex" if examples >= 1e6 else f"{examples / 1e3:.0f}k ex")
  if row.get("rounds") not in (None, ""):
    return (text + f", {row['rounds']} rounds (best {row['best_round']})" +
            result_files.restarts_note(row))
  return text + f", {row['steps']} steps (best {row['best_step']})"


def _bytes(row: Dict[str, Any]) -> str:
  if row.get("bytes_down_per_client") in (None, ""):
    return ""
  return (f"{communication.megabytes(row['bytes_down_per_client'])} / "
          f"{communication.megabytes(row['bytes_up_per_client'])}")


def markdown_table(rows: Sequence[Dict[str, Any]]) -> str:
  """The table; an epsilon column (at the runs' delta) when a row has DP."""
  private = any(row.get("epsilon") not in (None, "") for row in rows)
  header = ("| setting | loss | recall@1 | recall@5 | recall@10 ± SE | drop vs same "
            "loss ± SE | drop vs best centralized ± SE | trained on | MB down / up per "
            "client per round |" + (" epsilon (delta) |" if private else ""))
  lines = [header, "|" + "---|" * (10 if private else 9)]
  for row in rows:
    cells = [row["setting"], row["loss"], *(_percent(row, k) for k in RECALL_KEYS),
             *(_percent(row, k) for k in DROP_KEYS), _budget_used(row), _bytes(row)]
    if private:
      cells.append("" if row.get("epsilon") in (None, "") else
                   f"{row['epsilon']:.2f} ({row['target_delta']:g})")
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def _percent(row: Dict[str, Any], key: str) -> str:
  """'5.45%', with its standard error where the row has one ('5.45% ± 0.62');
  empty where the row has no such value (no centralized run: no drop)."""
  empty = lambda v: v is None or v == "" or math.isnan(v)
  value, error = row.get(key), row.get(f"{key}_se")
  if empty(value):
    return ""
  return f"{100 * value:.2f}%" + ("" if empty(error) else f" ± {100 * error:.2f}")


def _validation_curve(run_dir: str) -> List[tuple]:
  """(examples seen, validation global recall@10) of a run's evaluations."""
  points = []
  with open(os.path.join(run_dir, "metrics.csv")) as f:
    for record in csv.DictReader(f):
      if record.get("val_global_recall@10"):
        points.append((float(record["examples_seen"]),
                       float(record["val_global_recall@10"])))
  return points


def plot_recall_vs_examples(rows: Sequence[Dict[str, Any]], path: str) -> None:
  """Validation global recall@10 of every run against the examples it had
  trained on: federated solid (controls dotted), centralized dashed."""
  figure, axes = plt.subplots(figsize=(8, 5))
  colors = {}
  styles = {"centralized": "--", "federated": "-"}
  for row in rows:
    if row["setting"] == "baseline":
      axes.axhline(row["global_recall@10"], linestyle="-.", color="black",
                   label="most popular (test)")
      continue
    points = _validation_curve(row["run_dir"])
    line, = axes.plot([p[0] / 1e6 for p in points], [p[1] for p in points],
                      styles.get(row["setting"], ":"), marker="o", markersize=2,
                      color=colors.get(row["loss"]),
                      label=f"{row['setting']} {row['loss']}")
    colors[row["loss"]] = line.get_color()
  axes.set_xlabel("training examples seen (millions)")
  axes.set_ylabel("global recall@10 (validation users)")
  axes.set_title("Federated vs centralized dual-encoder retrieval")
  axes.legend(fontsize=7, loc="best")
  axes.grid(alpha=0.3)
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)


def write_reports(rows: Sequence[Dict[str, Any]], output_dir: str) -> str:
  """results.csv, results.md and recall_curves.png; returns the table."""
  table = markdown_table(rows)
  result_files.write_results(rows, CSV_COLUMNS, table, output_dir)
  plot_recall_vs_examples(rows, os.path.join(output_dir, "recall_curves.png"))
  communication.plot_quality_vs_bytes(
      [r for r in rows if r.get("bytes_down_per_client") not in (None, "")],
      lambda r: f"{r['setting']} {r['loss']}", "global_recall@10",
      os.path.join(output_dir, "quality_vs_bytes.png"))
  return table
