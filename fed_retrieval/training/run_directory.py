"""A run's output directory: one configuration per directory, one process at a time.

Re-running the same command resumes; a different configuration in an existing
directory is refused with the settings that differ. A process owns a directory
through an OS file lock on `.lock` (held until it exits, released by the
kernel however it ends): a second run on the same directory is refused,
naming the owner's pid, before it writes anything there. A directory that
cannot be written is reported in one line.
"""

import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

RUN_CONFIG = "run_config.json"
RESULTS = "results.json"
LOCK = ".lock"
# Locks this process holds (directory -> open file): kept until exit.
_held_locks: Dict[str, int] = {}
# Directories this process created (to remove if it fails before writing).
_created: List[str] = []


class RunDirectoryError(ValueError):
  """The output directory is in use by another run, or cannot be written."""


def describe_write_error(path: str, error: OSError) -> str:
  reason = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is full",
            errno.EROFS: "the file system is read-only"}.get(
                error.errno, error.strerror or str(error))
  return f"cannot write {path}: {reason}"


def lock_run_directory(output_dir: str) -> None:
  """Makes this process the directory's only user, or refuses naming the owner."""
  key = os.path.realpath(output_dir)
  if key in _held_locks:
    return
  try:
    if not os.path.isdir(output_dir):
      os.makedirs(output_dir)
      _created.append(output_dir)
    fd = os.open(os.path.join(output_dir, LOCK), os.O_RDWR | os.O_CREAT, 0o644)
  except OSError as e:
    raise RunDirectoryError(f"--output_dir={output_dir}: "
                            f"{describe_write_error(output_dir, e)}") from e
  try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
  except BlockingIOError:
    owner = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
    os.close(fd)
    raise RunDirectoryError(
        f"--output_dir={output_dir} is in use by another run (pid {owner}); wait "
        "for it to finish or use another --output_dir") from None
  os.ftruncate(fd, 0)
  os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
  _held_locks[key] = fd


def remove_unused_directories() -> None:
  """Removes the run directories this process created and wrote nothing to
  but its lock (a run that failed on bad input leaves no trace)."""
  for directory in reversed(_created):
    try:
      if os.listdir(directory) == [LOCK]:
        os.remove(os.path.join(directory, LOCK))
        os.rmdir(directory)
    except OSError:
      pass
  _created.clear()


def _plain(value: Any) -> Any:
  """A dataclass (a config in a run config) as its dict, for JSON."""
  if dataclasses.is_dataclass(value):
    return dataclasses.asdict(value)
  raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _normalized(config: Dict[str, Any]) -> Dict[str, Any]:
  return json.loads(json.dumps(config, sort_keys=True, default=_plain))


# Settings of how a run is computed, not of what it computes: the shards of a
# round's clients give the round of a TFF client each, and XLA the same steps
# (both tested), so a run resumes under another --client_shards or
# --client_jit_compile, or from before they existed.
EXECUTION_ONLY = ("client_shards", "client_jit_compile")


def run_identity(config: Any) -> Any:
  """What makes two run configs (as JSON) the same run: the config without its
  unset (None) settings, at any depth, so that a setting added to the code
  after a run was made, left unset, does not make it another run; and without
  the `EXECUTION_ONLY` ones. A run directory is re-opened, and a shared one
  found, by this identity."""
  if not isinstance(config, dict):
    return config
  return {k: run_identity(v) for k, v in config.items()
          if v is not None and k not in EXECUTION_ONLY}


def config_differences(existing: Dict[str, Any], config: Dict[str, Any],
                       prefix: str = "") -> List[Tuple[str, Any, Any]]:
  """(dotted key, existing value, new value) of every setting that differs,
  nested settings named by their path (`task.items`); None where absent."""
  differences = []
  for key in sorted(set(existing) | set(config)):
    old, new = existing.get(key), config.get(key)
    if isinstance(old, dict) and isinstance(new, dict):
      differences += config_differences(old, new, f"{prefix}{key}.")
    elif old != new:
      differences.append((f"{prefix}{key}", old, new))
  return differences


# Budget settings a finished run can be given more of: it trains on from its
# last checkpoint.
EXTENSIBLE = ("rounds", "max_passes", "epochs", "steps")


def _extends(old: Any, new: Any, key: str) -> bool:
  return (key.rsplit(".", 1)[-1] in EXTENSIBLE and isinstance(old, (int, float)) and
          isinstance(new, (int, float)) and new > old)


def claim_run_directory(output_dir: str, config: Dict[str, Any]) -> None:
  """Locks, creates or re-opens `output_dir` for `config`; a larger budget
  (`EXTENSIBLE`) re-opens a finished run to train on; refuses another config,
  naming the settings that differ."""
  lock_run_directory(output_dir)
  config = _normalized(config)
  path = os.path.join(output_dir, RUN_CONFIG)
  if os.path.isfile(path):
    with open(path) as f:
      existing = json.load(f)
    differences = config_differences(run_identity(existing), run_identity(config))
    if not differences:
      return
    described = "; ".join(f"{key}: {old!r} -> {new!r}" for key, old, new in differences)
    if not all(_extends(old, new, key) for key, old, new in differences):
      raise ValueError(
          f"--output_dir={output_dir} holds a run with another configuration "
          f"({described}); use a new --output_dir or the same flags")
    print(f"{output_dir}: extending the run ({described})", file=sys.stderr, flush=True)
    if os.path.isfile(os.path.join(output_dir, RESULTS)):
      os.remove(os.path.join(output_dir, RESULTS))
  write_json(path, config)


def shared_run_directory(root: str, name: str, run_config: Dict[str, Any]) -> str:
  """`root/<name>-<hash of the run's identity>`: the directory of a run that
  any program asking for the same run (`run_identity`) finds, a comparison's
  references trained once for every comparison on the same data and settings."""
  digest = hashlib.sha256(json.dumps(run_identity(_normalized(run_config)),
                                     sort_keys=True).encode()).hexdigest()[:12]
  return os.path.join(root, f"{name}-{digest}")


def link(target: str, link_path: str) -> None:
  """A relative symbolic link `link_path` -> `target` (replacing an older
  link; a real directory there is left alone)."""
  if os.path.islink(link_path):
    os.remove(link_path)
  elif os.path.exists(link_path):
    return
  os.symlink(os.path.relpath(target, os.path.dirname(link_path) or "."), link_path)


def read_run_config(output_dir: str) -> Dict[str, Any]:
  path = os.path.join(output_dir, RUN_CONFIG)
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{output_dir}: not a run directory (no {RUN_CONFIG})")
  return read_json(path)


def read_json(path: str) -> Dict[str, Any]:
  with open(path) as f:
    return json.load(f)


def write_json(path: str, value: Dict[str, Any]) -> None:
  """Writes JSON atomically (a clear error if it cannot be written)."""
  temporary = path + ".tmp"
  try:
    with open(temporary, "w") as f:
      json.dump(value, f, indent=2, sort_keys=True, default=_plain)
    os.replace(temporary, path)
  except OSError as e:
    raise RunDirectoryError(describe_write_error(path, e)) from e


# What a finished run directory holds that a person looks at, in this order.
_SHOWN_FILES = ("results.json", "results.md", "results.csv", "metrics.csv", "export",
                "tensorboard")


def starting_line(output_dir: str, done: int, unit: str) -> str:
  """'starting in DIR' or 'resuming from round N in DIR'."""
  start = f"resuming from {unit} {done}" if done else "starting"
  return f"{start} in {output_dir}"


def contents_line(output_dir: str) -> str:
  """'DIR holds results.json, ..., recall_curves.png (tensorboard --logdir=DIR)':
  what a person looks at in a run's or a comparison's directory (TensorBoard
  finds the logs of every run below DIR)."""
  shown = [name + ("/" if os.path.isdir(os.path.join(output_dir, name)) else "")
           for name in _SHOWN_FILES if os.path.exists(os.path.join(output_dir, name))]
  shown += sorted(name for name in os.listdir(output_dir) if name.endswith(".png"))
  return f"{output_dir} holds {', '.join(shown)} (tensorboard --logdir={output_dir})"


def finished_line(output_dir: str, trained: int, best: int, unit: str) -> str:
  """How long the run trained, which model it reports and where its files are."""
  return (f"finished after {unit} {trained} (reported: {unit} {best}); "
          f"{contents_line(output_dir)}")


def open_run(output_dir: str, run_config: Dict[str, Any],
             write_files: Callable[[str], Any] = lambda directory: None
             ) -> Optional[Dict[str, Any]]:
  """Claims `output_dir` for `run_config` and writes the run's own files there
  (`write_files(output_dir)`, e.g. the item ids of its rows); the results if
  the run has finished."""
  claim_run_directory(output_dir, run_config)
  write_files(output_dir)
  results_path = os.path.join(output_dir, RESULTS)
  return read_json(results_path) if os.path.isfile(results_path) else None
