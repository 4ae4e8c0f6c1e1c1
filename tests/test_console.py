"""The package's console commands: pyproject.toml names every script, each runs it."""

import os
import tomllib

from scripts import console
from tests.script_runs import ROOT, run_code


def test_pyproject_has_a_command_for_every_script():
  with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
    commands = tomllib.load(f)["project"]["scripts"]
  assert commands == {console.command_name(s): f"scripts.console:{s}"
                      for s in console.SCRIPTS}
  scripts = {name[:-3] for name in os.listdir(os.path.join(ROOT, "scripts"))
             if name.endswith(".py") and name not in ("__init__.py", "cli.py",
                                                      "console.py")}
  assert scripts == set(console.SCRIPTS)


def test_a_command_runs_its_script_as_main():
  # What the installed fed-retrieval-compare runs: the script's own --help.
  result = run_code("import sys; from scripts import console; "
                    "sys.argv = ['fed-retrieval-compare', '--help']; console.compare()")
  assert result.returncode == 0, result.stderr[-2000:]
  assert "--task" in result.stdout and "--references_dir" in result.stdout
