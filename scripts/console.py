"""The console commands `pip install` makes (pyproject.toml's [project.scripts]).

`fed-retrieval-compare ARGS` is `python -m scripts.compare ARGS`: each command
runs its script as the module `__main__`, so the script's start-up (`cli`:
the private network, Ctrl-C, its name in messages) is the same either way.
"""

import runpy
from typing import Callable

# The scripts with a command each: fed-retrieval-<name with dashes>.
SCRIPTS = ("compare", "train_federated", "train_centralized", "evaluate", "export",
           "recommend", "prepare_movielens", "worker", "spreadout_shard", "table_server",
           "benchmark",
           "benchmark_log",
           "benchmark_round_cost", "benchmark_spreadout", "benchmark_serving",
           "tfrs_reference")


def command_name(script: str) -> str:
  return "fed-retrieval-" + script.replace("_", "-")


def _command(script: str) -> Callable[[], None]:
  def main() -> None:
    runpy.run_module(f"scripts.{script}", run_name="__main__", alter_sys=True)
  main.__doc__ = f"python -m scripts.{script}"
  return main


for _script in SCRIPTS:  # scripts.console:compare, ... (pyproject.toml).
  globals()[_script] = _command(_script)
