"""What every comparison writes: results.csv (fixed columns) and results.md."""

import csv
import os
from typing import Any, Dict, Sequence


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
