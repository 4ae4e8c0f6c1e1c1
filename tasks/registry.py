"""The task families by name: `--task` picks one. A new family is a folder
under tasks/ and a line here (or a `register` call)."""

from typing import Dict

from absl import flags

from fed_retrieval.training import run_flags
from tasks import task_flags
from tasks.family import TaskFamily
from tasks.movielens.family import MovieLensFamily
from tasks.pu.family import PUFamily
from tasks.xc.family import XCFamily

FAMILIES: Dict[str, TaskFamily] = {
    "movielens": MovieLensFamily(),
    "xc": XCFamily(),
    "pu": PUFamily(),
}


def register(family: TaskFamily) -> None:
  """Adds a family (its flags defined by its import) under its name."""
  FAMILIES[family.name] = family


def get(name: str) -> TaskFamily:
  """The family called `name`, or one line naming --task's choices."""
  if name not in FAMILIES:
    raise ValueError(f"--task must be one of {', '.join(FAMILIES)}, got '{name}'")
  return FAMILIES[name]


def from_flags() -> TaskFamily:
  """The family --task names; a flag given that only another family reads is
  refused by name, not ignored."""
  family = get(task_flags.TASK.value)
  own = {holder.name for group in family.help_groups for holder in group[2]}
  for other in FAMILIES.values():
    for group in other.help_groups:
      for holder in group[2]:
        if holder.name not in own and flags.FLAGS[holder.name].present:
          raise ValueError(f"--{holder.name} is a flag of --task={other.name}, not "
                           f"--task={family.name}")
  return family


def help_groups():
  """--task and the run's flags, then every family's flags (each listed for its
  --task), as `scripts.cli` lists them."""
  run = ("Task and run", None, (task_flags.TASK, *run_flags.RUN_FLAGS[2]))
  return [run] + [group for family in FAMILIES.values() for group in family.help_groups]
