"""Writes every package's BUILD file from the Python imports (`--check`: only compare).

One target per module: `py_test` for `tests/test_*.py`, `py_binary` for the
entry points in `scripts/`, `py_library` for the rest; `deps` are the project
modules a file imports, `data` the scripts a test or its helpers run as
`python -m scripts.X`.
Run `python tools/build_files.py` after adding, moving or re-importing a module;
tests/test_build_files.py fails while a BUILD file is stale.
"""

import ast
import os
import re
import sys
from typing import Dict, List, Set

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("fed_retrieval", "losses", "tasks", "scripts", "tests", "tools")
DESCRIPTIONS = {
    "fed_retrieval": "Export of trained models; the library's layers live in the sub-packages.",
    "fed_retrieval/algorithms": "Federated algorithms: each module builds one TFF process.",
    "fed_retrieval/evaluation": "Retrieval and classification metrics and evaluation jobs.",
    "fed_retrieval/models": "Keras models (towers, class tables) and scoring against candidates.",
    "fed_retrieval/reports": "Comparisons, benchmarks and their tables and plots.",
    "fed_retrieval/runtime": "The TFF worker that cannot be orphaned.",
    "fed_retrieval/training": "The run loops every algorithm shares: checkpoints, metrics, stopping.",
    "losses": "Pluggable losses and regularizers.",
    "tasks": "The task-family protocol and registry, and what every family shares.",
    "tasks/movielens": "MovieLens ratings -> next-item examples split by user; the family.",
    "tasks/xc": "Extreme-classification data -> label-partitioned clients; the family.",
    "tasks/pu": "Labeled image sets -> positive-and-unlabeled clients (FedPU); the family.",
    "scripts": "absl-flag entry points: run as `python -m scripts.<name>` from the repo root.",
    "tests": "One py_test per test file; run them all with `make test` (pytest).",
    "tests/toy_family": "A toy task family: what a new family is (tests/test_task_family.py).",
    "tools": "Developer tools.",
}
_SCRIPT_RUN = re.compile(r"[\"']scripts\.(\w+)[\"']")
_NOT_BINARIES = {"__init__", "cli", "console"}


def module_files() -> Dict[str, str]:
  """Dotted module name -> path relative to ROOT, for every project module."""
  modules = {}
  for package in PACKAGES:
    for directory, _, files in os.walk(os.path.join(ROOT, package)):
      if "__pycache__" in directory:
        continue
      for name in files:
        if name.endswith(".py"):
          relative = os.path.relpath(os.path.join(directory, name), ROOT)
          modules[relative[:-3].replace(os.sep, ".")] = relative
  return modules


def _label(module: str) -> str:
  package, _, name = module.rpartition(".")
  return f"//{package.replace('.', '/')}:{_target_name(name, package)}"


def _target_name(name: str, package: str) -> str:
  return package.rpartition(".")[2] if name == "__init__" else name


def scripts_run(path: str, modules: Dict[str, str]) -> Set[str]:
  """The scripts that `path`, or a test helper it imports (a module of
  tests/, in turn), runs as `python -m scripts.X`: a test's data (a
  library's data would pull the scripts' toolchain into `bazel query`)."""
  found, seen, waiting = set(), {path}, [path]
  while waiting:
    current = waiting.pop()
    with open(os.path.join(ROOT, current)) as f:
      found |= set(_SCRIPT_RUN.findall(f.read()))
    helpers = {modules[m] for m in imported_modules(current, modules)
               if modules[m].startswith("tests/")} - seen
    seen |= helpers
    waiting += sorted(helpers)
  return found


def imported_modules(path: str, modules: Dict[str, str]) -> Set[str]:
  with open(os.path.join(ROOT, path)) as f:
    tree = ast.parse(f.read(), path)
  found = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found |= {alias.name for alias in node.names if alias.name in modules}
    elif isinstance(node, ast.ImportFrom) and node.module:
      if node.module in modules:
        found.add(node.module)
      found |= {f"{node.module}.{alias.name}" for alias in node.names
                if f"{node.module}.{alias.name}" in modules}
  return found


def _list(name: str, labels: List[str]) -> List[str]:
  if not labels:
    return []
  if len(labels) == 1:
    return [f"    {name} = [\"{labels[0]}\"],"]
  return [f"    {name} = ["] + [f"        \"{l}\"," for l in labels] + ["    ],"]


def build_file(directory: str, modules: Dict[str, str]) -> str:
  package = directory.replace("/", ".")
  lines = [f"# {DESCRIPTIONS[directory]}"]
  if directory not in ("tests", "tools"):
    lines.append('package(default_visibility = ["//visibility:public"])')
  own = sorted((m for m, p in modules.items() if os.path.dirname(p) == directory),
               key=lambda m: (not m.endswith("__init__"), m))
  for module in own:
    name = module.rpartition(".")[2]
    path = modules[module]
    if directory == "tests" and name.startswith("test_"):
      rule = "py_test"
    elif directory == "scripts" and name not in _NOT_BINARIES:
      rule = "py_binary"
    else:
      rule = "py_library"
    deps = sorted({_label(m) for m in imported_modules(path, modules) if m != module})
    data = sorted({f"//scripts:{s}" for s in scripts_run(path, modules)}
                  if rule == "py_test" else set())
    lines += ["", f"{rule}(", f"    name = \"{_target_name(name, package)}\",",
              f"    srcs = [\"{os.path.basename(path)}\"],"]
    lines += _list("deps", [d for d in deps if d != f"//{directory}:{name}"])
    lines += _list("data", data)
    lines.append(")")
  return "\n".join(lines) + "\n"


def directories(modules: Dict[str, str]) -> List[str]:
  return sorted({os.path.dirname(p) for p in modules.values()})


def main(argv: List[str]) -> int:
  modules = module_files()
  stale = []
  for directory in directories(modules):
    wanted = build_file(directory, modules)
    build = os.path.join(ROOT, directory, "BUILD")
    current = open(build).read() if os.path.exists(build) else None
    if current != wanted:
      stale.append(build)
      if "--check" not in argv:
        with open(build, "w") as f:
          f.write(wanted)
  if stale and "--check" in argv:
    print("stale BUILD files (run python tools/build_files.py):", *stale, sep="\n  ")
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
