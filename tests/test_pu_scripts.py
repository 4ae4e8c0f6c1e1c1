"""The PU comparison and training scripts as real processes: MNIST-format
files holding only the 10k test split, and a bad file -> one line, exit 2."""

import csv
import os

import pytest

from tests import script_runs
from tests.image_files import write_mnist

QUICK = ["--task=pu", "--pu_data=mnist", "--rounds=2", "--local_epochs=1",
         "--eval_every=1", "--conv_filters=4", "--dense_units=8"]


def run(*args):
  return script_runs.run_module(*args)


@pytest.mark.runs_long
def test_compare_on_mnist_test_files_writes_the_table(tmp_path):
  write_mnist(str(tmp_path), "test", 300, suffix=".gz")
  out = tmp_path / "out"
  result = run("scripts.compare", *QUICK, f"--mnist_path={tmp_path}",
               "--pu_settings=iid_5x2", f"--output_dir={out}")
  assert result.returncode == 0, result.stderr[-2000:]
  with open(out / "results.csv") as f:
    rows = list(csv.DictReader(f))
  assert [(r["group"], r["run"]) for r in rows] == [
      ("iid_5x2 (iid 5x2 no overlap)", m) for m in (
          "centralized_supervised", "fedpu", "positive_only", "supervised",
          "pu_single_negative", "majority_class")]
  assert all(0 <= float(r["accuracy"]) <= 1 for r in rows)
  assert all(int(r["rounds"]) == 2 for r in rows if r["kind"] == "federated")
  assert int(rows[1]["bytes_down_per_client"]) > 0
  assert float(rows[1]["gap_to_same_reference_se"]) > 0
  assert os.path.isfile(out / "curves.png")
  assert "| fedpu |" in (out / "results.md").read_text()
  assert "| majority_class |" in (out / "results.md").read_text()
  assert (f"comparison: {out} holds results.md, results.csv, curves.png, "
          "quality_vs_bytes.png") in result.stderr


def test_bad_idx_file_is_one_line_and_exit_2(tmp_path):
  write_mnist(str(tmp_path), "test", 50)
  with open(tmp_path / "t10k-images-idx3-ubyte", "r+b") as f:
    f.truncate(500)
  result = run("scripts.train_federated", *QUICK, f"--mnist_path={tmp_path}",
               "--positive_classes=3,7", f"--output_dir={tmp_path / 'out'}")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1].startswith(
      f"error: {tmp_path / 't10k-images-idx3-ubyte'}: header says")


def test_bad_setting_flag_is_one_line_and_exit_2(tmp_path):
  result = run("scripts.compare", "--task=pu", "--positive_classes=2,2",
               f"--output_dir={tmp_path}")
  assert result.returncode == 2
  assert "sum to 4; without overlap they must sum to the 10 classes" in result.stderr
