"""Flags parsed in a child process that serves one parse after another.

absl's flags are global, so a test must not parse a script's flags in its
own process; a new process per parse paid TensorFlow's import (~6 s) every
time. `FlagChild(resolver)` starts one child, forked from the script server
that imported the libraries (`tests.script_server`), that for each argv sent
resets the flags, parses the argv and answers what `resolver`
("module:function", called with no arguments after the parse) returns as
JSON, or `{"error": message}` when the flags or the resolver refuse the
argv. The child ends when its parent closes it (end of its stdin) or with
the test process.
"""

import atexit
import importlib
import json
import sys
from typing import Any, Dict

from tests import script_runs


class FlagChild:
  """`child(*argv)` -> the resolver's answer for these flags."""

  def __init__(self, resolver: str):
    self._resolver = resolver
    self._process = None

  def __call__(self, *argv: str) -> Dict[str, Any]:
    if self._process is None or self._process.poll() is not None:
      self._process = script_runs.start_module("tests.flag_child", self._resolver,
                                               pipes=True)
      atexit.register(self.close)
    self._process.pipe_in.write(json.dumps(list(argv)) + "\n")
    self._process.pipe_in.flush()
    line = self._process.pipe_out.readline()
    if not line:
      raise RuntimeError(f"{self._resolver}: the flag child ended on {argv}")
    return json.loads(line)

  def close(self) -> None:
    if self._process is not None:
      self._process.pipe_in.close()
      self._process.wait(timeout=60)
      self._process.pipe_out.close()
      self._process = None


def main() -> None:
  from scripts import cli  # pylint: disable=g-import-not-at-top,unused-import  (quiets TF)
  from absl import flags  # pylint: disable=g-import-not-at-top
  module, function = sys.argv[1].split(":")
  resolve = getattr(importlib.import_module(module), function)
  for line in sys.stdin:
    flags.FLAGS.unparse_flags()
    try:
      flags.FLAGS(["prog", *json.loads(line)])
      answer = resolve()
    except (ValueError, flags.Error) as e:
      answer = {"error": str(e)}
    print(json.dumps(answer), flush=True)


if __name__ == "__main__":
  main()
