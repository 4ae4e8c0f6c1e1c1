"""A comparison repeated at several seeds, summarized run by run.

A run's test metric moves with its seed (initialization, client sampling,
negatives drawn) by more than its standard error over the test units shows: on
Delicious a federated run's P@1 spans 4-7 points over seeds 0-2 where that
error is 1. So `scripts.compare --seeds` runs the whole comparison once per
seed (`seed_<s>/`, each a comparison of its own) and this module gives each
run its headline and its gaps to the references as the mean over the seeds
with the standard error of that mean (the sample deviation over sqrt(seeds)),
beside each seed's value.
"""

import math
from typing import Dict, List, Sequence

import numpy as np

from fed_retrieval.reports import comparison
from fed_retrieval.reports import result_files

Row = comparison.Row


def mean_and_error(values: Sequence[float]) -> Dict[str, float]:
  """The mean of `values` and its standard error (nan for one value)."""
  values = np.asarray(values, np.float64)
  error = (float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1
           else math.nan)
  return {"value": float(np.mean(values)), "se": error}


def across_seeds(rows_by_seed: Dict[int, Sequence[Row]], metric: str) -> List[Row]:
  """A row per run of the seeds' comparisons (each has the same runs): the
  headline `metric`, the gaps and the passes as mean and standard error over
  the seeds (`<key>`, `<key>_se`) and at each seed (`<key>_seed<s>`)."""
  seeds = sorted(rows_by_seed)
  summary = []
  for first in rows_by_seed[seeds[0]]:
    name = (first["group"], first["run"])
    matched = []
    for seed in seeds:
      found = [r for r in rows_by_seed[seed] if (r["group"], r["run"]) == name]
      if len(found) != 1:
        raise ValueError(f"seed {seed}'s comparison has {len(found)} rows of {name[1]}")
      matched.append(found[0])
    row = {"group": first["group"], "run": first["run"], "kind": first["kind"],
           "seeds": len(seeds)}
    for key in (metric, *comparison.GAPS, "passes"):
      values = [r.get(key) for r in matched]
      if any(v is None or v == "" for v in values):
        continue
      measured = mean_and_error(values)
      row[key], row[f"{key}_se"] = measured["value"], measured["se"]
      row.update({f"{key}_seed{s}": v for s, v in zip(seeds, values)})
    summary.append(row)
  return summary


def markdown_table(rows: Sequence[Row], metric: str, seeds: Sequence[int],
                   relative: bool) -> str:
  """The summary's table: mean ± SE over seeds, then each seed, in percent."""
  grouped = len({r["group"] for r in rows}) > 1
  gaps = any(comparison.GAPS[1] in r for r in rows)
  word = "drop" if relative else "gap"
  header = (["setting"] if grouped else []) + ["run", f"{metric} (%) mean ± SE"] + [
      f"seed {s}" for s in seeds]
  if gaps:
    header += [f"{word} vs same reference (%)", f"{word} vs best reference (%)"]
  header.append("passes, mean")
  lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  for row in rows:
    cells = ([row["group"]] if grouped else []) + [
        row["run"], comparison.number(row, metric)] + [
        comparison.number(row, f"{metric}_seed{s}") for s in seeds]
    if gaps:
      cells += [comparison.number(row, key, "" if relative else "+")
                for key in comparison.GAPS]
    cells.append("" if row.get("passes") is None else f"{row['passes']:.1f}")
    lines.append("| " + " | ".join(cells) + " |")
  return "\n".join(lines) + "\n"


def write_reports(rows_by_seed: Dict[int, Sequence[Row]], metric: str, relative: bool,
                  family_name: str, output_dir: str, command: str = "") -> str:
  """results.csv and results.md of the seeds in `output_dir` (each seed's own
  comparison pages are in `seed_<s>/`); returns the table."""
  seeds = sorted(rows_by_seed)
  rows = across_seeds(rows_by_seed, metric)
  table = markdown_table(rows, metric, seeds, relative)
  links = ", ".join(f"[seed {s}]({seed_dir_name(s)}/results.md)" for s in seeds)
  page = result_files.page(f"{family_name} comparison over seeds {', '.join(map(str, seeds))}",
                           command, table + f"\nEach seed's comparison: {links}.\n")
  columns = sorted({k for r in rows for k in r} - {"group", "run", "kind", "seeds"})
  result_files.write_results(rows, ["group", "run", "kind", "seeds", *columns], page,
                             output_dir)
  return table


def seed_dir_name(seed: int) -> str:
  """The directory, in the comparison's, of its run at `seed`."""
  return f"seed_{seed}"
