"""One comparison for every task family: federated runs beside their
centralized references and a trivial baseline, with standard errors.

For each group of a family's comparison (`tasks.family.Group`: one setting of
the data), every run trains with the shared loops until it converges (or its
cap) and reports its best evaluation: the federated runs in
`output_dir/[group/]<run>`, each centralized reference once for every
comparison of the same data and settings, in `references_dir/<run>-<hash of
its run config>` (linked from the comparison). A row per run and per
baseline carries the family's test metrics, the headline's standard error
over the test units (points or users), the passes, rounds or steps and
examples it trained on, and the bytes a client moves per round; a federated
row also its gap to the reference of its kind and to the group's best
reference, as a difference in points or (`relative_gaps`) a relative drop,
with a standard error paired over the test units.

Reports: results.csv (a row per run), results.md (the command, the commit,
the machine, the table), curves.png (validation headline against examples
trained on, a panel per group) and quality_vs_bytes.png.
"""

import csv
import math
import os
import re
from typing import Any, Dict, List, Optional, Sequence

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

from fed_retrieval.evaluation import units
from fed_retrieval.reports import communication
from fed_retrieval.reports import result_files
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import centralized_loop
from fed_retrieval.training import federated_loop
from fed_retrieval.training import run_directory
from fed_retrieval.training import validation_curve
from tasks import family as family_lib

Row = Dict[str, Any]
GAPS = ("gap_to_same_reference", "gap_to_best_reference")
RUN_KEYS = ("rounds", "best_round", "steps", "best_step", "passes", "best_passes",
            "examples_seen", "bytes_down_per_client", "bytes_up_per_client",
            "mean_real_bytes_down_per_client", "mean_real_bytes_up_per_client",
            "worker_restarts", "epsilon", "target_delta")


def default_references_dir(output_dir: str) -> str:
  """Where a comparison's centralized references live unless told: `references/`
  beside its output directory, shared by the comparisons there."""
  return os.path.join(os.path.dirname(os.path.abspath(output_dir)), "references")


def slug(name: str) -> str:
  """A run or group name as a directory name."""
  return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_")


def _row(group: str, name: str, kind: str, results: Dict[str, Any], run_dir: str,
         reference: Optional[str] = None) -> Row:
  return {"group": group, "run": name, "kind": kind, "reference": reference,
          **results["test"], **{k: results[k] for k in RUN_KEYS if k in results},
          "run_dir": run_dir}


def run_comparison(family: family_lib.TaskFamily, settings: Any, output_dir: str,
                   references_dir: Optional[str] = None) -> List[Row]:
  """Trains (or resumes, or reads) every run of the family's comparison; a row
  per run and per baseline, with the gaps (`with_gaps`)."""
  run_directory.lock_run_directory(output_dir)
  references_dir = references_dir or default_references_dir(output_dir)
  groups = family.comparison(settings)
  rows = []
  for group in groups:
    group_dir = os.path.join(output_dir, slug(group.name)) if len(groups) > 1 else output_dir
    for run in group.centralized:
      job = run.job()
      run_dir = run_directory.shared_run_directory(references_dir, slug(run.name),
                                                   job.run_config)
      results = centralized_loop.run_centralized(job, run.config, run_dir)
      os.makedirs(group_dir, exist_ok=True)
      run_directory.link(run_dir, os.path.join(group_dir, slug(run.name)))
      rows.append(_row(group.name, run.name, "centralized", results, run_dir))
    for run in group.federated:
      run_dir = os.path.join(group_dir, slug(run.name))
      # A worker for each run: idle, it still takes CPU from the next run.
      with tff_runtime.execution_context():
        results = federated_loop.run_federated(run.job(), run.loop, run_dir)
      rows.append(_row(group.name, run.name, "federated", results, run_dir,
                       run.reference))
    if group.baseline is not None:
      rows.append({"group": group.name, "run": group.baseline_name, "kind": "baseline",
                   **group.baseline()})
  return with_gaps(rows, family.headline(settings), family.relative_gaps)


def _test_units(row: Row) -> Optional[units.Units]:
  path = os.path.join(row.get("run_dir") or "", validation_curve.TEST_UNITS)
  return validation_curve.read_test_units(row["run_dir"]) if os.path.isfile(path) else None


def gap(row: Row, reference: Row, metric: str, relative: bool) -> Dict[str, float]:
  """The row's gap to `reference` on `metric` (`relative`: the relative drop
  (reference - row) / reference; else row - reference), with its standard
  error paired over the test units where both runs saved them."""
  value, base = row[metric], reference[metric]
  ours, theirs = _test_units(row), _test_units(reference)
  if ours is None or theirs is None:
    error = math.nan
  elif relative:
    error = units.relative_drop(theirs, ours)[1]
  else:
    error = units.paired_gain(ours, theirs)[1]
  if relative:
    return {"value": (base - value) / base if base else math.nan, "se": error}
  return {"value": value - base, "se": error}


def with_gaps(rows: List[Row], metric: str, relative: bool) -> List[Row]:
  """Adds to each federated row its gap to its group's reference of its kind
  and to the group's best reference (`gap`)."""
  for row in rows:
    if row["kind"] != "federated":
      continue
    references = {r["run"]: r for r in rows
                  if r["kind"] == "centralized" and r["group"] == row["group"]}
    if not references:
      continue
    best = max(references.values(), key=lambda r: r[metric])
    for key, reference in zip(GAPS, (references.get(row["reference"]), best)):
      if reference is not None:
        measured = gap(row, reference, metric, relative)
        row[key], row[f"{key}_se"] = measured["value"], measured["se"]
  return rows


def number(row: Row, key: str, sign: str = "") -> str:
  """'55.96' or '55.96 ± 1.11' (percent), '' where the row has none."""
  empty = lambda v: v is None or v == "" or (isinstance(v, float) and math.isnan(v))
  value, error = row.get(key), row.get(f"{key}_se")
  if empty(value):
    return ""
  return f"{100 * value:{sign}.2f}" + ("" if empty(error) else f" ± {100 * error:.2f}")


def trained_on(row: Row) -> str:
  """'25.2 passes (best 18.9), 40 rounds, 8.0k ex' or '... 616 steps ...'."""
  if row.get("examples_seen") in (None, ""):
    return ""
  text = (f"{row['passes']:.1f} passes (best {row['best_passes']:.1f}), "
          if row.get("passes") not in (None, "") else "")
  text += (f"{row['rounds']} rounds" if row.get("rounds") not in (None, "")
           else f"{row['steps']} steps")
  examples = row["examples_seen"]
  text += (f", {examples / 1e6:.2f}M ex" if examples >= 1e6
           else f", {examples / 1e3:.1f}k ex")
  return text + result_files.restarts_note(row)


def markdown_table(rows: Sequence[Row], columns: Sequence[Sequence[str]], metric: str,
                   relative: bool) -> str:
  """The comparison's table: a row per run, metrics in percent, the headline
  `metric` and the gaps with their standard errors."""
  grouped = len({r["group"] for r in rows}) > 1
  gaps = any(GAPS[1] in r for r in rows)
  deployed = any(r.get("mean_real_bytes_down_per_client") not in (None, "")
                 for r in rows)
  private = any(r.get("epsilon") not in (None, "") for r in rows)
  header = (["setting"] if grouped else []) + ["run"] + [
      f"{title} (%)" + (" ± SE" if key == metric else "") for key, title in columns]
  if gaps:
    word = "drop" if relative else "gap"
    header += [f"{word} vs same reference (%) ± SE", f"{word} vs best reference (%) ± SE"]
  header += ["trained on", "MB down / up per client per round"]
  header += ["MB down, mean as deployed"] if deployed else []
  header += ["epsilon (delta)"] if private else []
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for row in rows:
    cells = ([row["group"]] if grouped else []) + [row["run"]] + [
        number(row, key) for key, _ in columns]
    if gaps:
      cells += [number(row, key, "" if relative else "+") for key in GAPS]
    cells += [trained_on(row),
              "" if row.get("bytes_down_per_client") in (None, "") else
              f"{communication.megabytes(row['bytes_down_per_client'])} / "
              f"{communication.megabytes(row['bytes_up_per_client'])}"]
    if deployed:
      cells.append(communication.megabytes(row.get("mean_real_bytes_down_per_client")))
    if private:
      cells.append("" if row.get("epsilon") in (None, "") else
                   f"{row['epsilon']:.2f} ({row['target_delta']:g})")
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def validation_curve_of(run_dir: str, metric: str) -> List[tuple]:
  """(examples seen, validation `metric`) of a run's evaluations."""
  with open(os.path.join(run_dir, "metrics.csv")) as f:
    return [(float(r["examples_seen"]), float(r[f"{prefix}_{metric}"]))
            for r in csv.DictReader(f)
            for prefix in ("val", "test") if r.get(f"{prefix}_{metric}")]


def plot_curves(rows: Sequence[Row], metric: str, path: str) -> None:
  """Validation `metric` of every run against the examples it trained on
  (log scale): federated solid, centralized dashed, the baseline's test value
  dash-dotted; a panel per group."""
  groups = list(dict.fromkeys(r["group"] for r in rows))
  figure, axes = plt.subplots(len(groups), 1, figsize=(8, 4.5 * len(groups)),
                              squeeze=False)
  for panel, group in zip(axes[:, 0], groups):
    for row in (r for r in rows if r["group"] == group):
      if row["kind"] == "baseline":
        panel.axhline(100 * row[metric], linestyle="-.", color="black",
                      label=f"{row['run']} (test)")
        continue
      points = validation_curve_of(row["run_dir"], metric)
      panel.plot([p[0] for p in points], [100 * p[1] for p in points],
                 "--" if row["kind"] == "centralized" else "-", marker="o",
                 markersize=2, label=row["run"])
    panel.set_xscale("log")
    panel.set_xlabel("training examples seen")
    panel.set_ylabel(f"{metric} (%, validation)")
    panel.set_title(group or "federated runs, centralized references, baseline",
                    fontsize=9)
    panel.legend(fontsize=7)
    panel.grid(alpha=0.3, which="both")
  figure.tight_layout()
  figure.savefig(path, dpi=110)
  plt.close(figure)


def csv_columns(rows: Sequence[Row], columns: Sequence[Sequence[str]],
                metric: str) -> List[str]:
  """results.csv's columns: the run, its metrics, the gaps, the budget."""
  extra = sorted({k for r in rows for k in r} - {"run_dir"} - {key for key, _ in columns}
                 - {"group", "run", "kind", "reference", f"{metric}_se", *GAPS,
                    *(f"{g}_se" for g in GAPS), *RUN_KEYS})
  return (["group", "run", "kind", "reference"] + [key for key, _ in columns] +
          [f"{metric}_se", *GAPS, *(f"{g}_se" for g in GAPS), *RUN_KEYS] + extra)


def write_reports(rows: Sequence[Row], family: family_lib.TaskFamily, settings: Any,
                  output_dir: str, command: str = "") -> str:
  """results.csv, results.md (the page: command, commit, machine, table,
  plots), curves.png and quality_vs_bytes.png; returns the table."""
  columns, metric = family.columns(settings), family.headline(settings)
  table = markdown_table(rows, columns, metric, family.relative_gaps)
  plot_curves(rows, metric, os.path.join(output_dir, "curves.png"))
  with_bytes = [r for r in rows if r.get("bytes_down_per_client") not in (None, "")]
  if with_bytes:
    communication.plot_quality_vs_bytes(
        with_bytes, lambda r: r["run"], metric,
        os.path.join(output_dir, "quality_vs_bytes.png"))
  page = result_files.page(f"{family.name} comparison", command, table,
                           ["curves.png"] + (["quality_vs_bytes.png"] if with_bytes else []))
  result_files.write_results(rows, csv_columns(rows, columns, metric), page, output_dir)
  return table
