"""Results pages: what made them above the figures, for comparisons and benchmarks."""

import json
import os

from fed_retrieval.reports import result_files
from tests.script_runs import run_module


def test_a_report_becomes_a_table_of_its_figures():
  table = result_files.report_table({"read": {"seconds": 16.504756, "rows": 200000},
                                     "path": "/tmp/log.csv", "ks": [1, 5]})
  assert table.splitlines() == ["| figure | value |", "|---|---|",
                                "| read.seconds | 16.5 |", "| read.rows | 200000 |",
                                "| path | /tmp/log.csv |", "| ks | [1, 5] |"]


def test_a_page_says_what_made_it(tmp_path):
  path = os.path.join(tmp_path, "pages", "bench.md")
  result_files.write_report_page(path, "Bench", {"steps": 3})
  with open(path) as f:
    lines = f.read().splitlines()
  assert lines[0] == "# Bench"
  assert lines[2].startswith("Made by `") and f"{os.cpu_count()}-core machine" in lines[2]
  assert "| steps | 3 |" in lines
  result_files.write_report_page(None, "Bench", {"steps": 3})  # No --page: no page.


def test_a_benchmark_writes_its_page_with_its_command(tmp_path):
  log, page = os.path.join(tmp_path, "log.csv"), os.path.join(tmp_path, "log.md")
  result = run_module("scripts.benchmark_log", "--rows=2000", "--users=50", "--items=100",
                      f"--log_path={log}", f"--page={page}")
  assert result.returncode == 0, result.stderr[-2000:]
  report = json.loads(result.stdout)
  with open(page) as f:
    text = f.read()
  assert "Made by `python -m scripts.benchmark_log --rows=2000 --users=50" in text
  assert report["rows"] == 2000 and "| rows | 2000 |" in text
  assert f"| read_seconds | {report['read_seconds']:.4g} |" in text
