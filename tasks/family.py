"""The task-family protocol: what the run loops, the comparison and the scripts consume.

A family (MovieLens retrieval, XC, PU, or one of a user's own) is a folder
under tasks/ holding a `TaskFamily` subclass, plus one line in
`tasks/registry.py`. It turns the flags into its settings and the settings
into `Group`s of runs: for each group (one setting of the data), the task's
federated runs (`FederatedRun`: a `federated_loop.FederatedJob` and its loop
settings), the centralized references they are read against
(`CentralizedRun`) and a trivial baseline. The rest is shared: the loops
train and stop every job alike, `reports.comparison` lays any family's runs
beside its references and baseline, and the scripts dispatch on `--task`
through the registry.

A job evaluates a model on "validation" and "test" into a dict of metrics that
holds, under `evaluation.units.UNITS`, the `Units` of the family's `headline`
metric (the stopping rule's noise and the comparison's standard errors).
"""

import abc
import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple


@dataclasses.dataclass
class FederatedRun:
  """A federated run of a comparison: `job()` builds the job (its task and
  model), `loop` how the loop runs it, `reference` the name of the
  centralized run of its group it is read against (None: only the best)."""
  name: str
  job: Callable[[], Any]  # -> federated_loop.FederatedJob
  loop: Any  # loop_config.LoopConfig
  reference: Optional[str] = None


@dataclasses.dataclass
class CentralizedRun:
  """A centralized reference: `job()` builds it, `config` its loop
  (`centralized_loop.CentralizedConfig`). Its directory is shared by every
  comparison of the same data and settings (named by its run config)."""
  name: str
  job: Callable[[], Any]  # -> centralized_loop.CentralizedJob
  config: Any


@dataclasses.dataclass
class Group:
  """The runs of one setting of the data: a comparison has one group per
  setting (PU's partitions) or just one. `baseline()` gives the trivial
  baseline's test metrics (with the headline's `_se`)."""
  name: str
  federated: List[FederatedRun]
  centralized: List[CentralizedRun]
  baseline_name: str
  baseline: Callable[[], Dict[str, float]]


class TaskFamily(abc.ABC):
  """One task family: its name, how its table reads, and builders of runs.

  `relative_gaps`: gaps to references as relative drops (retrieval recall,
  the papers' MovieLens measure) or as differences in points (precision,
  accuracy). `help_groups`: the family's flags as `scripts.cli` lists them.
  Settings (whatever `settings_from_flags` returns) are a frozen dataclass
  with at least `loop` (`loop_config.LoopConfig`) and `centralized`
  (`centralized_loop.CentralizedConfig`), which scripts may replace.
  """
  name: str = ""
  relative_gaps: bool = False
  help_groups: Sequence[Any] = ()

  @abc.abstractmethod
  def columns(self, settings: Any) -> Sequence[Tuple[str, str]]:
    """(metric key, title) of the table's metric columns, in their order."""

  @abc.abstractmethod
  def headline(self, settings: Any) -> str:
    """The metric the stopping rule watches and the table gives with its
    standard error and gaps (one of the columns)."""

  @abc.abstractmethod
  def settings_from_flags(self) -> Any:
    """The family's settings (data, model, algorithms, loop) the flags give."""

  @abc.abstractmethod
  def comparison(self, settings: Any) -> List[Group]:
    """The groups of runs a comparison trains and tabulates."""

  @abc.abstractmethod
  def federated_run(self, settings: Any) -> FederatedRun:
    """The one federated run the flags describe (`train_federated`)."""

  @abc.abstractmethod
  def centralized_run(self, settings: Any) -> CentralizedRun:
    """The one centralized run the flags describe (`train_centralized`)."""
