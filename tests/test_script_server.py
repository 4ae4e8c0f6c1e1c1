"""The forked script children behave as `python -m`/`-c` processes do."""

import ast
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


_TRACE = """
import tensorflow as tf
from losses import pu_risk
from tests import transpiled
tf.function(pu_risk.risk_terms)(tf.zeros([2, 7]), tf.zeros([2, 2]), "probability")
print([key for key in transpiled.keys() if key[0].endswith("pu_risk.py")])
"""


def test_a_child_transpiles_what_the_one_before_it_transpiled_before_it_starts():
  first = run_code(_TRACE)
  assert first.returncode == 0, first.stderr
  traced = ast.literal_eval(first.stdout)
  assert {key[2] for key in traced} == {"risk_terms", "surrogate_loss"}
  inherited = run_code("from tests import transpiled; print(transpiled.keys())")
  assert set(traced) <= set(ast.literal_eval(inherited.stdout))


def test_a_function_transpiled_from_its_key_is_the_one_a_trace_makes_and_uses():
  result = run_code("""
import numpy as np
import tensorflow as tf
from tensorflow.python.autograph.impl import api
from losses import pu_risk
from tests import transpiled
cache = api._TRANSPILER._cache._cache
args = (tf.constant(np.eye(2, 7, dtype=np.float32)), tf.constant([[0.5, -1.0], [2.0, 0.1]]),
        "cross_entropy")
cache.clear()
traced = tf.function(pu_risk.risk_terms)(*args)
wanted = transpiled.keys()
cache.clear()
print(transpiled.transpile(wanted), sorted(wanted) == sorted(transpiled.keys()))
made = {code: dict(by_options) for code, by_options in cache.items()}
again = tf.function(pu_risk.risk_terms)(*args)
print(all(cache[code] == by_options for code, by_options in made.items()), len(cache) == len(made))
print(all(np.array_equal(traced[name], again[name]) for name in traced))
""")
  assert result.returncode == 0, result.stderr
  assert result.stdout.split() == ["2", "True", "True", "True", "True"]
