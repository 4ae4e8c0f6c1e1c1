"""Every Python file belongs to a BUILD target, and `bazel query` accepts the graph."""

import ast
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("fed_retrieval", "losses", "tasks", "scripts", "tests")


def python_files() -> set:
  found = set()
  for package in PACKAGES:
    for directory, _, files in os.walk(os.path.join(ROOT, package)):
      if "__pycache__" in directory:
        continue
      found |= {os.path.relpath(os.path.join(directory, f), ROOT)
                for f in files if f.endswith(".py")}
  return found


def sources_in_build_files() -> set:
  """Files named in `srcs` of any rule, read statically (Starlark is Python syntax)."""
  sources = set()
  for package in PACKAGES:
    build = os.path.join(ROOT, package, "BUILD")
    assert os.path.isfile(build), f"{package}/ has no BUILD file"
    with open(build) as f:
      tree = ast.parse(f.read(), build)
    for call in ast.walk(tree):
      if isinstance(call, ast.Call):
        for keyword in call.keywords:
          if keyword.arg == "srcs":
            sources |= {os.path.join(package, s.value) for s in keyword.value.elts}
  return sources


def test_every_python_file_is_in_a_target():
  missing = sorted(python_files() - sources_in_build_files())
  assert not missing, f"Python files in no BUILD target: {missing}"


def test_build_files_name_no_missing_files():
  stale = sorted(sources_in_build_files() - python_files())
  assert not stale, f"BUILD files name files that do not exist: {stale}"


# Offline, Bazel cannot fetch the repositories its own py_binary/py_test
# toolchains pull in (rules_cc, the coverage tools), so the query follows the
# project's graph: everything the libraries depend on, and the direct sources and
# deps of binaries and tests.
_QUERY = ("deps(kind(py_library, //...) + labels(deps, kind('py_binary|py_test', //...)))"
          " + labels(srcs, //...) + labels(data, //...)")


def test_bazel_query_resolves_the_whole_graph():
  bazel = shutil.which("bazel")
  if bazel is None:
    if os.environ.get("CI"):
      pytest.fail("bazel is required in CI (Debian's bazel-bootstrap; `make test` "
                  "installs it)")
    pytest.skip("bazel not installed (make test installs Debian's bazel-bootstrap)")
  result = subprocess.run(
      [bazel, "--batch", "query", "--noimplicit_deps", "--noshow_progress",
       "--output=label_kind", _QUERY],
      cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  source_files = {line.split()[-1][2:].replace(":", "/")
                  for line in result.stdout.splitlines()
                  if line.startswith("source file //")}
  missing_targets = sorted(f for f in source_files
                           if not os.path.exists(os.path.join(ROOT, f)))
  assert not missing_targets, f"BUILD labels that name nothing: {missing_targets}"
  assert python_files() <= source_files, sorted(python_files() - source_files)
