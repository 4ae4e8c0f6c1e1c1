"""Every Python file belongs to a BUILD target, and `bazel query` accepts the graph."""

import os
import shutil
import subprocess

import pytest

from tools import build_files

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_build_file_matches_the_imports():
  modules = build_files.module_files()
  stale = [d for d in build_files.directories(modules)
           if not os.path.exists(os.path.join(ROOT, d, "BUILD")) or
           open(os.path.join(ROOT, d, "BUILD")).read() != build_files.build_file(d, modules)]
  assert not stale, f"stale BUILD files (run python tools/build_files.py): {stale}"


def test_generated_deps_follow_the_imports():
  """The check is not vacuous: the generated deps follow the imports."""
  modules = build_files.module_files()
  text = build_files.build_file("fed_retrieval/training", modules)
  assert '"//fed_retrieval/training:early_stopping"' in text
  assert 'name = "federated_loop"' in text


def python_files() -> set:
  return set(build_files.module_files().values())


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
