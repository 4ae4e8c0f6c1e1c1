"""Run directories: one configuration each, differences named by their path."""

import json
import os

import pytest

from fed_retrieval.training import run_directory


def test_differences_are_named_by_their_nested_path():
  existing = {"setting": "federated", "task": {"items": 9, "seed": 0},
              "training": {"rounds": 10}}
  config = {"setting": "federated", "task": {"items": 10, "seed": 0},
            "training": {"rounds": 20, "patience": 4}}
  assert run_directory.config_differences(existing, config) == [
      ("task.items", 9, 10), ("training.patience", None, 4),
      ("training.rounds", 10, 20)]


def test_a_setting_added_later_unset_keeps_old_runs(tmp_path):
  directory = str(tmp_path / "run")
  run_directory.claim_run_directory(directory, {"training": {"rounds": 10}})
  # The same run, by a version of the code with a new setting left at None.
  run_directory.claim_run_directory(
      directory, {"training": {"rounds": 10, "max_local_steps": None}})
  with open(os.path.join(directory, run_directory.RUN_CONFIG)) as f:
    assert json.load(f) == {"training": {"rounds": 10}}
  with pytest.raises(ValueError, match=r"another configuration \(training.max_local_steps: "
                     r"None -> 20\); use a new --output_dir or the same flags"):
    run_directory.claim_run_directory(
        directory, {"training": {"rounds": 10, "max_local_steps": 20}})


def test_a_run_resumes_under_other_client_shards_or_xla(tmp_path):
  # Shards and XLA change how a round is computed, not the round: an XC run
  # made before XC had shards, or a run re-started with --client_shards=0 or
  # another --client_jit_compile, resumes.
  directory = str(tmp_path / "run")
  run_directory.claim_run_directory(directory, {"training": {"rounds": 10}})
  run_directory.claim_run_directory(
      directory, {"training": {"rounds": 10, "client_shards": 2}})
  run_directory.claim_run_directory(
      directory, {"training": {"rounds": 10, "client_shards": 0}})
  run_directory.claim_run_directory(
      directory, {"training": {"rounds": 10, "client_jit_compile": True}})
  with pytest.raises(ValueError, match=r"\(training.seed: None -> 1\)"):
    run_directory.claim_run_directory(
        directory, {"training": {"rounds": 10, "client_shards": 0, "seed": 1}})


def test_a_shared_run_is_found_by_the_same_identity_as_a_resumed_one(tmp_path):
  # A comparison's references: a config that re-opens a run directory (a new
  # setting left unset, other shards) finds the same shared directory.
  root = str(tmp_path)
  config = {"model": {"dim": 8, "scoring": None}, "training": {"rounds": 10}}
  directory = run_directory.shared_run_directory(root, "centralized", config)
  assert os.path.basename(directory).startswith("centralized-")
  for same in ({"model": {"dim": 8}, "training": {"rounds": 10}},
               {"model": {"dim": 8, "scoring": None, "residual": None},
                "training": {"rounds": 10, "client_shards": 4}}):
    assert run_directory.shared_run_directory(root, "centralized", same) == directory
  for other in ({"model": {"dim": 8, "scoring": "dot"}, "training": {"rounds": 10}},
                {"model": {"dim": 16}, "training": {"rounds": 10}}):
    assert run_directory.shared_run_directory(root, "centralized", other) != directory


def test_a_larger_budget_reopens_a_finished_run_and_only_the_budget(tmp_path, capsys):
  directory = str(tmp_path)
  config = {"setting": "federated", "training": {"rounds": 10, "clients_per_round": 5}}
  run_directory.claim_run_directory(directory, config)
  run_directory.write_json(os.path.join(directory, run_directory.RESULTS), {"done": 1})
  longer = {"setting": "federated", "training": {"rounds": 20, "clients_per_round": 5}}
  assert run_directory.open_run(directory, longer) is None  # Trains on.
  assert "extending the run (training.rounds: 10 -> 20)" in capsys.readouterr().err
  assert run_directory.read_run_config(directory) == longer
  for other in ({"setting": "federated", "training": {"rounds": 5, "clients_per_round": 5}},
                {"setting": "federated", "training": {"rounds": 30, "clients_per_round": 6}}):
    with pytest.raises(ValueError, match=r"another configuration \((training\.[^)]*)\)"):
      run_directory.claim_run_directory(directory, other)
  with pytest.raises(ValueError, match=r"\(training.clients_per_round: 5 -> 6; "
                                       r"training.rounds: 20 -> 30\)"):
    run_directory.claim_run_directory(directory, other)


def test_the_start_and_end_lines_say_where_the_run_is(tmp_path):
  assert run_directory.starting_line("runs/x", 0, "round") == "starting in runs/x"
  assert run_directory.starting_line("runs/x", 40, "round") == (
      "resuming from round 40 in runs/x")
  for name in ("results.json", "metrics.csv", "recall_curves.png", ".lock"):
    (tmp_path / name).write_text("")
  (tmp_path / "tensorboard").mkdir()
  assert run_directory.finished_line(str(tmp_path), 85, 65, "round") == (
      f"finished after round 85 (reported: round 65); {tmp_path} holds results.json, "
      f"metrics.csv, tensorboard/, recall_curves.png (tensorboard --logdir={tmp_path})")


def test_a_directory_a_failed_run_only_locked_is_removed_and_others_are_kept(tmp_path):
  created, existing = str(tmp_path / "new" / "run"), str(tmp_path / "old")
  os.makedirs(existing)
  run_directory.lock_run_directory(created)
  run_directory.lock_run_directory(existing)
  run_directory.remove_unused_directories()
  assert not os.path.exists(created) and os.listdir(existing) == [run_directory.LOCK]
  written = str(tmp_path / "written")
  run_directory.claim_run_directory(written, {"setting": "x"})
  run_directory.remove_unused_directories()
  assert sorted(os.listdir(written)) == [run_directory.LOCK, run_directory.RUN_CONFIG]
