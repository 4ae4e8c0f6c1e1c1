"""What every comparison and benchmark writes: results.csv (fixed columns) and
results.md, a page that says what made it (the command, the commit, the
machine's cores, the date) above its table and plots."""

import csv
import datetime
import os
import subprocess
from typing import Any, Dict, Sequence

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
