"""The commands README.md and the Makefile show, and a check of their flags.

`commands_in_markdown` finds every `python -m scripts.NAME ...` of a Markdown
text (code blocks, with their `\\` continuations and trailing comments, and
inline code spans), `commands_in_makefile` those of the Makefile's recipes.
`flag_problems` checks each flag against the script's own absl parser in a
child process (scripts define some flags of the same name, so one process
imports one script); no command is run.
"""

import dataclasses
import json
import re
import shlex
from typing import Dict, List, Sequence

from tests import script_runs

_SCRIPT = re.compile(r"python3? -m scripts\.(\w+)")
_INLINE_CODE = re.compile(r"`([^`]*)`", re.S)
_MAKE_TARGET = re.compile(r"^([\w-]+):", re.M)


@dataclasses.dataclass(frozen=True)
class Command:
  script: str
  args: List[str]
  where: str  # "README.md:123": the line the command starts on.


def _command(text: str, where: str) -> Command:
  match = _SCRIPT.search(text)
  rest = text[match.end():].replace("\\\n", " ").replace("\n", " ")
  args = [arg.strip("[]") for arg in shlex.split(rest, comments=True)]
  args = [arg for arg in args if arg.startswith("-")]  # Optional flags: [--flag].
  return Command(match.group(1), args, where)


def commands_in_markdown(text: str, name: str = "README.md") -> List[Command]:
  """Every script command of a Markdown text, in order."""
  commands = []
  in_block = False
  lines = text.split("\n")
  i = 0
  while i < len(lines):
    line = lines[i]
    if line.lstrip().startswith("```"):
      in_block = not in_block
    elif in_block and _SCRIPT.search(line):
      start = i
      while lines[i].rstrip().endswith("\\"):
        i += 1
      commands.append(_command("\n".join(lines[start:i + 1]), f"{name}:{start + 1}"))
    i += 1
  outside = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
  for match in _INLINE_CODE.finditer(outside):
    if _SCRIPT.search(match.group(1)):
      line = outside.count("\n", 0, match.start()) + 1
      commands.append(_command(match.group(1), f"{name}:{line}"))
  return commands


def commands_in_makefile(text: str, name: str = "Makefile") -> List[Command]:
  """Every script command of a Makefile's recipes (`$(PY) -m scripts.NAME`),
  the Makefile's own variables (`NAME ?= value`, `NAME = value`) expanded to
  their defaults."""
  text = text.replace("$(PY) -m", "python -m")
  variables = dict(re.findall(r"^([A-Z_]+) *\??= *(.*)$", text, flags=re.M))
  for _ in range(len(variables)):  # Values that name other variables.
    text = re.sub(r"\$\(([A-Z_]+)\)",
                  lambda m: variables.get(m.group(1), m.group(0)), text)
  return commands_in_markdown("```\n" + text + "\n```", name)


def make_targets(text: str) -> List[str]:
  """The targets a Makefile defines."""
  return _MAKE_TARGET.findall(text)


def make_targets_named(markdown: str) -> List[str]:
  """The targets of every `make TARGET` a Markdown text names."""
  return re.findall(r"(?:^|`|= )make ([a-z][\w-]*)", markdown, flags=re.M)


def flag_problems(commands: Sequence[Command]) -> List[str]:
  """One line per flag no script parser accepts (unknown name or a value its
  parser refuses), naming where the command is."""
  by_script: Dict[str, List[Command]] = {}
  for command in commands:
    by_script.setdefault(command.script, []).append(command)
  problems = []
  for script, script_commands in sorted(by_script.items()):
    request = json.dumps([script, [[c.where, c.args] for c in script_commands]])
    result = script_runs.run_module("tests.check_script_flags", input=request)
    if result.returncode != 0:
      problems.append(f"scripts.{script}: cannot be imported: "
                      f"{result.stderr.strip().splitlines()[-1:]}")
      continue
    problems.extend(json.loads(result.stdout.strip().splitlines()[-1]))
  return problems


# `--flag` (default `value` ...), `--flag=value` (the default), and a value a
# sentence names after its flag: "`--flag`: `a` (the default) ...".
_FLAG = re.compile(r"`--(\w+)(?:=([^`]*))?`")
_DEFAULT_AFTER_FLAG = re.compile(r"\s*\((?:the )?default(?::| is)?\s*(?:`([^`]+)`|([\w.\-]+))?[),;]")
_VALUE_THE_DEFAULT = re.compile(r"`([^`]+)` \((?:the )?default\)")


@dataclasses.dataclass(frozen=True)
class StatedDefault:
  flag: str
  value: str
  where: str


def stated_defaults(text: str, name: str = "README.md") -> List[StatedDefault]:
  """Every flag default a Markdown text states, outside code blocks: the
  value in "(default ...)" right after a flag, a `--flag=value` followed by
  "(the default)", or "`value` (the default)" after its flag in a paragraph."""
  outside = re.sub(r"```.*?```", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
  stated = []
  offset = 0
  for paragraph in re.split(r"\n\s*\n", outside):
    start = outside.index(paragraph, offset)
    offset = start + len(paragraph)
    line = lambda at: f"{name}:{outside.count(chr(10), 0, start + at) + 1}"
    flags_at = list(_FLAG.finditer(paragraph))
    for match in flags_at:
      after = _DEFAULT_AFTER_FLAG.match(paragraph, match.end())
      value = match.group(2) if match.group(2) is not None else (
          after and (after.group(1) or after.group(2)))
      if after and value:
        stated.append(StatedDefault(match.group(1), value.strip(), line(match.start())))
    for match in _VALUE_THE_DEFAULT.finditer(paragraph):
      before = [f for f in flags_at if f.end() <= match.start()]
      if before and not match.group(1).startswith("--"):
        stated.append(StatedDefault(before[-1].group(1), match.group(1),
                                    line(match.start())))
  return stated


def _same_value(stated: str, default: str) -> bool:
  try:
    return float(stated) == float(default)
  except ValueError:
    return stated.strip().lower() == default.strip().lower()


def default_problems(stated: Sequence[StatedDefault],
                     scripts: Sequence[str] = ("compare", "train_federated",
                                               "train_centralized", "recommend",
                                               "export", "evaluate")) -> List[str]:
  """One line per stated default that is not the flag's: its absl default,
  or for a flag without one (the family decides), a value its help gives."""
  found: Dict[str, list] = {}
  for script in scripts:
    missing = sorted({s.flag for s in stated} - set(found))
    if not missing:
      break
    result = script_runs.run_module("tests.check_script_flags", "--defaults",
                                    input=json.dumps([script, missing]))
    assert result.returncode == 0, result.stderr[-2000:]
    found.update(json.loads(result.stdout.strip().splitlines()[-1]))
  problems = []
  for s in stated:
    if s.flag not in found:
      problems.append(f"{s.where}: --{s.flag} is no script's flag")
      continue
    default, help_text = found[s.flag]
    ok = (_same_value(s.value, default) if default is not None else
          re.search(r"default[^)]*(?<![\w.])" + re.escape(s.value) + r"(?![\w.])",
                    help_text))
    if not ok:
      problems.append(f"{s.where}: --{s.flag} stated default '{s.value}', the flag's is "
                      + (f"'{default}'" if default is not None else f"'{help_text}'"))
  return problems
