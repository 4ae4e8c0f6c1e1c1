"""The comparison's gaps and their standard errors, its CSV, table, page and
plot; the MovieLens centralized runs' clock; and compare.py end to end."""

import csv
import dataclasses
import os
import types

import numpy as np
import pytest

from fed_retrieval.evaluation import units
from fed_retrieval.reports import comparison
from fed_retrieval.training import validation_curve
from fed_retrieval.training.centralized_loop import CentralizedConfig
from fed_retrieval.training.loop_config import LoopConfig
from tasks.movielens import family as movielens_family
from tasks.movielens import sequence_examples
from tasks.movielens.settings import CENTRALIZED_DEFAULTS
from tasks.movielens.settings import HINGE_MAX_LOCAL_STEPS
from tasks.movielens.settings import MovieLensSettings
from tests.script_runs import run_module

COLUMNS = [("global_recall@5", "recall@5"), ("global_recall@10", "recall@10")]
METRIC = "global_recall@10"
USERS = np.repeat(np.arange(20), 30)


def fake_run(tmp_path, name, recall, seed):
  """A run directory: a validation curve, and test hits of about `recall`
  on 20 users of 30 examples (its saved test units)."""
  run_dir = os.path.join(tmp_path, name)
  os.makedirs(run_dir)
  with open(os.path.join(run_dir, "metrics.csv"), "w") as f:
    f.write("round,examples_seen,train_loss,val_global_recall@10\n")
    for round_num, value in enumerate([None, recall / 2, None, recall], start=1):
      f.write(f"{round_num},{1000 * round_num},1.0,{'' if value is None else value}\n")
  hits = np.random.default_rng(seed).random(USERS.size) < recall
  return run_dir, validation_curve.test_metrics(
      {METRIC: hits.mean(), units.UNITS: units.per_group(hits, USERS)}, METRIC, run_dir)


def rows(tmp_path):
  result = []
  for seed, (kind, name, reference, recall) in enumerate([
      ("centralized", "centralized batch_softmax", None, 0.10),
      ("federated", "federated batch_softmax", "centralized batch_softmax", 0.04),
      ("centralized", "centralized global_softmax", None, 0.20),
      ("federated", "federated global_softmax", "centralized global_softmax", 0.19),
      ("federated", "federated_dp1 global_softmax", "centralized global_softmax", 0.15)]):
    run_dir, test = fake_run(tmp_path, name.replace(" ", "_"), recall, seed)
    used = ({"examples_seen": 1_500_000, "steps": 93_750, "best_step": 80_000,
             "passes": 12.0, "best_passes": 10.24} if kind == "centralized" else
            {"examples_seen": 733_000, "rounds": 45, "best_round": 40, "passes": 9.2,
             "best_passes": 8.2, "bytes_down_per_client": 253_000,
             "bytes_up_per_client": 253_000})
    if "dp1" in name:
      used.update(epsilon=3.456, target_delta=1e-5)
    result.append({"group": "", "run": name, "kind": kind, "reference": reference,
                   "global_recall@5": test[METRIC] / 2, **test, **used,
                   "run_dir": run_dir})
  result.append({"group": "", "run": "most_popular", "kind": "baseline",
                 "global_recall@5": 0.01, METRIC: 0.02, f"{METRIC}_se": 0.004})
  return result


def test_relative_drops_with_standard_errors_paired_over_users(tmp_path):
  table_rows = comparison.with_gaps(rows(tmp_path), METRIC, relative=True)
  central_bs, federated_bs, central_gs = table_rows[:3]
  hits = lambda row: validation_curve.read_test_units(row["run_dir"])
  assert federated_bs["gap_to_same_reference"] == pytest.approx(
      (central_bs[METRIC] - federated_bs[METRIC]) / central_bs[METRIC])
  assert federated_bs["gap_to_same_reference_se"] == units.relative_drop(
      hits(central_bs), hits(federated_bs))[1]
  # The best reference is global softmax's, for every federated row.
  assert federated_bs["gap_to_best_reference"] == pytest.approx(
      (central_gs[METRIC] - federated_bs[METRIC]) / central_gs[METRIC])
  assert "gap_to_same_reference" not in central_bs
  # The bootstrap draws users: as wide as resampling the users' hits by hand.
  draws = np.random.default_rng(1).integers(0, 20, size=(4000, 20))
  per_user = lambda row: hits(row).numerators / 30
  recalls = per_user(central_bs)[draws].mean(1), per_user(federated_bs)[draws].mean(1)
  by_hand = np.std((recalls[0] - recalls[1]) / recalls[0])
  assert federated_bs["gap_to_same_reference_se"] == pytest.approx(by_hand, rel=0.1)


def test_absolute_gaps_with_paired_standard_errors(tmp_path):
  table_rows = comparison.with_gaps(rows(tmp_path), METRIC, relative=False)
  central, federated = table_rows[2], table_rows[3]
  difference = units.paired_gain(validation_curve.read_test_units(federated["run_dir"]),
                                 validation_curve.read_test_units(central["run_dir"]))
  assert federated["gap_to_same_reference"] == pytest.approx(difference[0])
  assert federated["gap_to_same_reference_se"] == pytest.approx(difference[1])


def test_reports(tmp_path):
  table_rows = comparison.with_gaps(rows(tmp_path), METRIC, relative=True)
  family = types.SimpleNamespace(name="movielens", relative_gaps=True,
                                 columns=lambda s: COLUMNS, headline=lambda s: METRIC)
  table = comparison.write_reports(table_rows, family, None, str(tmp_path),
                                   "python -m scripts.compare --synthetic=small")
  with open(os.path.join(tmp_path, "results.csv")) as f:
    records = list(csv.DictReader(f))
  assert list(records[0])[:6] == ["group", "run", "kind", "reference",
                                  "global_recall@5", METRIC]
  assert [r["kind"] for r in records] == ["centralized", "federated", "centralized",
                                          "federated", "federated", "baseline"]
  assert float(records[1]["gap_to_same_reference"]) == pytest.approx(
      table_rows[1]["gap_to_same_reference"])
  assert records[0]["gap_to_same_reference"] == ""
  assert (records[1]["examples_seen"], records[1]["rounds"], records[1]["best_round"],
          records[1]["steps"]) == ("733000", "45", "40", "")
  lines = table.splitlines()
  assert lines[0] == ("| run | recall@5 (%) | recall@10 (%) ± SE | drop vs same reference "
                      "(%) ± SE | drop vs best reference (%) ± SE | trained on | MB down "
                      "/ up per client per round | epsilon (delta) |")
  federated = table_rows[1]
  assert lines[3].startswith(
      f"| federated batch_softmax | {100 * federated['global_recall@5']:.2f} | "
      f"{100 * federated[METRIC]:.2f} ± {100 * federated[METRIC + '_se']:.2f} | "
      f"{100 * federated['gap_to_same_reference']:.2f} ± "
      f"{100 * federated['gap_to_same_reference_se']:.2f} |")
  assert "| 9.2 passes (best 8.2), 45 rounds, 733.0k ex | 0.253 / 0.253 |  |" in table
  assert "| 12.0 passes (best 10.2), 93750 steps, 1.50M ex |" in table
  assert lines[6].endswith("| 3.46 (1e-05) |")
  assert lines[7] == "| most_popular | 1.00 | 2.00 ± 0.40 |  |  |  |  |  |"
  with open(os.path.join(tmp_path, "results.md")) as f:
    page = f.read()
  assert "Made by `python -m scripts.compare --synthetic=small` at commit " in page
  assert table in page and "![curves.png](curves.png)" in page
  for name in ("curves.png", "quality_vs_bytes.png"):
    with open(os.path.join(tmp_path, name), "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_centralized_runs_are_evaluated_and_capped_on_the_federated_clock():
  counts = [10, 40, 100]
  users = np.repeat([1, 2, 3], counts)
  task = types.SimpleNamespace(federated_train=sequence_examples.Examples(
      users, np.zeros((users.size, 2), np.int32), np.ones(users.size, np.int32)))
  loop = LoopConfig(clients_per_round=2, max_local_steps=2, eval_every=5, rounds=31,
                    min_passes=3.0, min_rounds=20, patience=4, report_model="maximum")
  settings = MovieLensSettings(task=None, loop=loop)
  # A round: 2 clients of the mean of min(n, 2 * 16) = (10 + 32 + 32) / 3 examples.
  per_round = 2 * 74 / 3
  assert movielens_family.federated_examples_per_round(task, settings) == pytest.approx(
      per_round)
  # The references' clock takes the family's cap (20 batches, which none of
  # these users fills), not the runs' 2: a round of 2 clients of 50 examples.
  clock_round = 2 * 150 / 3
  matched = movielens_family.with_federated_schedule(settings, task)
  assert matched.eval_every_steps == round(5 * clock_round / 16) == 31
  assert matched.steps == round(31 * clock_round / 16) == 194
  assert (matched.patience, matched.report_model, matched.batch_size) == (4, "maximum", 16)
  # The minimum: 3 passes of 3 users at 2 a round = 5 rounds' examples (the
  # federated minimum of 20 rounds is of server steps, not examples).
  assert matched.min_passes == pytest.approx(5 * clock_round / 150)
  uncapped = dataclasses.replace(settings, loop=dataclasses.replace(loop, max_local_steps=None))
  assert movielens_family.with_federated_schedule(uncapped, task) == matched
  given = movielens_family.with_federated_schedule(MovieLensSettings(
      task=None, loop=loop, centralized=CentralizedConfig(epochs=3, eval_every_steps=7,
                                                          min_passes=1.0)), task)
  assert (given.epochs, given.steps, given.eval_every_steps, given.min_passes) == (
      3, None, 7, 1.0)
  assert CENTRALIZED_DEFAULTS.epochs is None and CENTRALIZED_DEFAULTS.min_passes is None
  # A hinge loss's federated runs take fewer batches; its reference keeps
  # the clock above, as every loss's does.
  assert settings.loop_for("hinge_spreadout") == dataclasses.replace(
      loop, max_local_steps=HINGE_MAX_LOCAL_STEPS)
  assert settings.loop_for("global_softmax") == loop


@pytest.mark.runs_long
def test_compare_script_end_to_end(tmp_path):
  """MovieLens with every control (one loss: each control is its own run of
  it); the runs stop by patience or caps, and a second comparison reuses the
  first one's centralized reference."""
  command = ["--synthetic=small",
             "--rounds=4", "--clients_per_round=5", "--eval_every=1", "--patience=1",
             "--centralized_eval_every_steps=100", "--centralized_max_epochs=1",
             f"--cache_dir={tmp_path}/cache"]
  result = run_module(
      "scripts.compare", *command, "--losses=batch_softmax", "--include_shuffled",
      "--include_fedsgd", "--noise_multipliers=1", "--clip_norm=0.5",
      f"--output_dir={tmp_path}/cmp")
  assert result.returncode == 0, result.stderr[-3000:]
  assert "| federated_shuffled batch_softmax |" in result.stdout
  assert "| federated_sgd batch_softmax |" in result.stdout
  assert "WARNING" not in result.stderr and "fork" not in result.stderr
  with open(os.path.join(tmp_path, "cmp", "results.csv")) as f:
    records = list(csv.DictReader(f))
  assert [r["run"] for r in records] == [
      "centralized batch_softmax", "federated batch_softmax",
      "federated_shuffled batch_softmax", "federated_sgd batch_softmax",
      "federated_dp1 batch_softmax", "most_popular"]
  assert all(float(r["epsilon"]) > 0 for r in records if "dp1" in r["run"])
  assert all(r["epsilon"] == "" for r in records if "dp1" not in r["run"])
  for record in records[:-1]:
    if record["kind"] == "centralized":
      assert int(record["best_step"]) <= int(record["steps"])
      assert int(record["examples_seen"]) == 16 * int(record["steps"])
    else:
      assert 1 <= int(record["best_round"]) <= int(record["rounds"]) <= 4
      assert float(record["gap_to_same_reference_se"]) > 0
  for name in ("results.md", "curves.png"):
    assert os.path.getsize(os.path.join(tmp_path, "cmp", name)) > 0
  # The references live beside the comparison, linked from it, and a second
  # comparison on the same data and settings reuses them.
  linked = os.path.join(tmp_path, "cmp", "centralized_batch_softmax")
  assert os.path.islink(linked) and os.path.dirname(
      os.path.realpath(linked)) == os.path.realpath(tmp_path / "references")
  again = run_module("scripts.compare", *command, "--losses=batch_softmax",
                     "--algorithms=fedss", f"--output_dir={tmp_path}/cmp2")
  assert again.returncode == 0, again.stderr[-3000:]
  assert "centralized batch_softmax: starting" not in again.stderr
  assert os.path.realpath(os.path.join(tmp_path, "cmp2", "centralized_batch_softmax")) == (
      os.path.realpath(linked))
