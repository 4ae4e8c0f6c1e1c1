"""What every comparison and benchmark writes: results.csv (fixed columns) and
results.md, a page that says what made it (the command, the commit, the
machine's cores, the date) above its table and plots."""

import csv
import datetime
import json
import os
import shlex
import subprocess
import sys
from typing import Any, Dict, Optional, Sequence

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def commit() -> str:
  """The checkout's commit (with '+changes' when its tree differs), or 'unknown'."""
  def git(*args):
    return subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True,
                          check=False).stdout.strip()
  head = git("rev-parse", "--short", "HEAD")
  if not head:
    return "unknown"
  return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no")
                 else "")


def page(title: str, command: str, table: str, images: Sequence[str] = ()) -> str:
  """A results page: what made it, then the table and the plots."""
  made = (f"Made by `{command}` " if command else "Made ") + (
      f"at commit {commit()} on a {os.cpu_count()}-core machine, "
      f"{datetime.date.today().isoformat()}.")
  return (f"# {title}\n\n{made}\n\n{table}\n" +
          "".join(f"![{name}]({name})\n" for name in images))


def command_line() -> str:
  """This program as one would type it: `python -m scripts.X ARGS`."""
  spec = getattr(sys.modules["__main__"], "__spec__", None)
  program = (f"python -m {spec.name}" if spec is not None
             else os.path.basename(sys.argv[0]))
  return " ".join([program, *(shlex.quote(a) for a in sys.argv[1:])])


def report_table(report: Dict[str, Any]) -> str:
  """A JSON report as a two-column markdown table, nested keys joined by '.',
  floats to 4 significant digits."""
  def rows(value, prefix=""):
    if isinstance(value, dict):
      for key, item in value.items():
        yield from rows(item, f"{prefix}{key}.")
    else:
      yield prefix[:-1], value
  lines = ["| figure | value |", "|---|---|"]
  shown = lambda v: (v if isinstance(v, str) else f"{v:.4g}" if isinstance(v, float)
                     else json.dumps(v))
  lines += [f"| {key} | {shown(value)} |" for key, value in rows(report)]
  return "\n".join(lines) + "\n"


def write_report_page(path: Optional[str], title: str, report: Dict[str, Any],
                      table: Optional[str] = None) -> None:
  """A benchmark's page at `path` (None: none): what made it, then `table`
  (default: every figure of `report`)."""
  if not path:
    return
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    f.write(page(title, command_line(), table or report_table(report)))


def write_results(rows: Sequence[Dict[str, Any]], columns: Sequence[str],
                  markdown: str, output_dir: str) -> None:
  """results.csv with `columns` (missing values empty) and results.md."""
  with open(os.path.join(output_dir, "results.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, columns, extrasaction="ignore")
    writer.writeheader()
    for row in rows:
      writer.writerow({k: row.get(k, "") for k in columns})
  with open(os.path.join(output_dir, "results.md"), "w") as f:
    f.write(markdown)


def restarts_note(row: Dict[str, Any]) -> str:
  """' (2 worker restarts)' for a run whose TFF worker had to be replaced, else ''."""
  count = row.get("worker_restarts") or 0
  return f" ({count} worker restart{'s' if count > 1 else ''})" if count else ""
