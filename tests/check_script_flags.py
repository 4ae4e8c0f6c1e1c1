"""Checks flags against one script's absl parser, without running it.

Reads `[script, [[where, [arg, ...]], ...]]` as JSON on stdin and prints a JSON
list of problems: a flag the script does not define, or a value its parser
refuses. A value holding a placeholder (`<dir>`) is checked by name only.
With `--defaults`, reads `[script, [name, ...]]` and prints, for each name
the script defines, `[its default as a command line gives it, its help]`.
Used by `tests/readme_commands.py`.
"""

import importlib
import json
import sys
from typing import Dict, List, Optional, Sequence, Tuple

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


def defaults_of(names: Sequence[str]) -> Dict[str, Tuple[Optional[str], str]]:
  return {name: (None if flags.FLAGS[name].default is None
                 else flags.FLAGS[name].serialize().partition("=")[2]
                 if not isinstance(flags.FLAGS[name].default, bool)
                 else str(flags.FLAGS[name].default).lower(),
                 flags.FLAGS[name].help)
          for name in names if name in flags.FLAGS}


def main() -> None:
  script, request = json.load(sys.stdin)
  importlib.import_module(f"scripts.{script}")
  if "--defaults" in sys.argv[1:]:
    print(json.dumps(defaults_of(request)))
  else:
    print(json.dumps(problems_of(request)))


if __name__ == "__main__":
  main()
