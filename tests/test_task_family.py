"""A new task family is a folder and a registry line: the toy family of
tests/toy_family runs through the CLI, the shared loops and the comparison
once registered (in a child process: a comparison stops the TFF workers it
starts, and absl's flags are global)."""

import csv
import os

from tests.script_runs import run_code

COMPARE_TOY = """
import sys
from tasks import registry
from tests.toy_family.family import ToyFamily
registry.register(ToyFamily())
from scripts import compare, cli
sys.argv = ["compare", "--task=toy", "--output_dir=" + sys.argv[1]]
cli.run(compare.main)
"""


def test_a_registered_family_learns_beside_its_reference_and_baseline(tmp_path):
  result = run_code(COMPARE_TOY, str(tmp_path / "cli"))
  assert result.returncode == 0, result.stderr[-3000:]
  assert "| fedavg |" in result.stdout and "| majority_class |" in result.stdout
  with open(tmp_path / "cli" / "results.csv") as f:
    rows = {row["run"]: row for row in csv.DictReader(f)}
  assert list(rows) == ["centralized", "fedavg", "majority_class"]
  assert float(rows["majority_class"]["accuracy"]) < 0.4
  assert float(rows["centralized"]["accuracy"]) > 0.8
  assert float(rows["fedavg"]["accuracy"]) > 0.8
  assert abs(float(rows["fedavg"]["gap_to_same_reference"])) < 0.1
  assert 0 < float(rows["fedavg"]["gap_to_same_reference_se"]) < 0.05
  assert int(rows["fedavg"]["rounds"]) >= 4  # The minimum: 2 passes of 6 at 3 a round.
  assert os.path.islink(tmp_path / "cli" / "centralized")
