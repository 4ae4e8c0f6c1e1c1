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
