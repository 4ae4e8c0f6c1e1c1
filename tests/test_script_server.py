"""The forked script children behave as `python -m`/`-c` processes do."""

import signal
import subprocess

import pytest

from tests import script_server
from tests.script_runs import run_code
from tests.script_runs import run_module
from tests.script_runs import start_module


def test_a_child_gets_its_argv_environment_input_and_exit_code(tmp_path):
  result = run_code("import os, sys; print(sys.argv[1:], os.getcwd(), os.environ['X'], "
                    "os.environ.get('HOME'), sys.stdin.read()); "
                    "print('to stderr', file=sys.stderr); sys.exit(3)", "a", "--b=c",
                    cwd=str(tmp_path), env={"X": "y", "HOME": None}, input="in\n")
  assert result.returncode == 3
  assert result.stdout == f"['a', '--b=c'] {tmp_path} y None in\n\n"
  assert result.stderr == "to stderr\n"


def test_an_uncaught_exception_is_a_traceback_and_exit_1():
  result = run_code("1 / 0")
  assert result.returncode == 1
  assert "Traceback" in result.stderr and "ZeroDivisionError" in result.stderr


def test_a_module_runs_as_main_with_its_flags():
  result = run_module("scripts.recommend", "--model_dir=/nonexistent", "--history=1")
  assert (result.returncode, result.stdout, result.stderr) == (
      2, "", "error: --model_dir=/nonexistent: no such export directory\n")


def test_a_signal_ends_a_child_and_a_timeout_kills_it():
  sleeper = start_module(None, code="import time; time.sleep(60)")
  assert sleeper.poll() is None
  sleeper.send_signal(signal.SIGTERM)
  assert sleeper.wait(timeout=30) == -signal.SIGTERM
  with pytest.raises(subprocess.TimeoutExpired):
    run_code("import time; time.sleep(60)", timeout=0.5)


def test_the_preload_leaves_out_every_module_that_defines_a_flag():
  preloaded = set(script_server.flag_free_modules())
  assert {"tasks.xc.flags", "tasks.task_flags", "fed_retrieval.index_flags"}.isdisjoint(
      preloaded)
  assert {"losses.spreadout", "fed_retrieval.top_k_index"} <= preloaded
