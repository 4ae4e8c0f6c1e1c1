"""Checks flags against one script's absl parser, without running it.

Reads `[script, [[where, [arg, ...]], ...]]` as JSON on stdin and prints a JSON
list of problems: a flag the script does not define, or a value its parser
refuses. A value holding a placeholder (`<dir>`) is checked by name only.
Used by `tests/readme_commands.py`.
"""

import importlib
import json
import sys
from typing import List, Sequence, Tuple

from scripts import cli  # pylint: disable=unused-import  (quiets TF, as the scripts)
from absl import flags


def problems_of(commands: Sequence[Tuple[str, Sequence[str]]]) -> List[str]:
  problems = []
  for where, args in commands:
    for arg in args:
      name, has_value, value = arg.lstrip("-").partition("=")
      if name not in flags.FLAGS and name.startswith("no") and name[2:] in flags.FLAGS:
        name = name[2:]  # --noflag: a boolean's negation.
      if name not in flags.FLAGS:
        problems.append(f"{where}: unknown flag --{name}")
      elif has_value and "<" not in value:
        try:
          flags.FLAGS[name].parse(value)
        except (flags.IllegalFlagValueError, ValueError) as e:
          problems.append(f"{where}: --{name}={value}: {e}")
  return problems


def main() -> None:
  script, commands = json.load(sys.stdin)
  importlib.import_module(f"scripts.{script}")
  print(json.dumps(problems_of(commands)))


if __name__ == "__main__":
  main()
