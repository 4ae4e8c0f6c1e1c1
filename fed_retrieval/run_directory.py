"""A run's output directory: one configuration per directory, written once.

Re-running the same command resumes; a different configuration in an existing
directory is refused with the settings that differ.
"""

import json
import os
from typing import Any, Dict, Optional

RUN_CONFIG = "run_config.json"
RESULTS = "results.json"


def _normalized(config: Dict[str, Any]) -> Dict[str, Any]:
  return json.loads(json.dumps(config, sort_keys=True))


def claim_run_directory(output_dir: str, config: Dict[str, Any]) -> None:
  """Creates or re-opens `output_dir` for `config`; refuses another config."""
  config = _normalized(config)
  path = os.path.join(output_dir, RUN_CONFIG)
  if os.path.isfile(path):
    with open(path) as f:
      existing = json.load(f)
    if existing != config:
      keys = sorted(set(existing) | set(config))
      differing = [f"{k}: {existing.get(k)!r} -> {config.get(k)!r}"
                   for k in keys if existing.get(k) != config.get(k)]
      raise ValueError(
          f"--output_dir={output_dir} holds a run with another configuration "
          f"({'; '.join(differing)}); use a new --output_dir or the same flags")
    return
  os.makedirs(output_dir, exist_ok=True)
  temporary = path + ".tmp"
  with open(temporary, "w") as f:
    json.dump(config, f, indent=2, sort_keys=True)
  os.replace(temporary, path)


def read_run_config(output_dir: str) -> Dict[str, Any]:
  path = os.path.join(output_dir, RUN_CONFIG)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{output_dir}: not a run directory (no {RUN_CONFIG})")
  return read_json(path)


def read_json(path: str) -> Dict[str, Any]:
  with open(path) as f:
    return json.load(f)


def write_json(path: str, value: Dict[str, Any]) -> None:
  """Writes JSON atomically."""
  temporary = path + ".tmp"
  with open(temporary, "w") as f:
    json.dump(value, f, indent=2, sort_keys=True)
  os.replace(temporary, path)


def open_run(output_dir: str, run_config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
  """Claims `output_dir` for `run_config`; the results if the run has finished."""
  claim_run_directory(output_dir, run_config)
  results_path = os.path.join(output_dir, RESULTS)
  return read_json(results_path) if os.path.isfile(results_path) else None
