"""Configs and jobs for tests: FedAvg's settings and the loop's from one
keyword list, and a MovieLens FedAvg run of the family's job."""

import dataclasses
from typing import Any, Dict, Tuple

from fed_retrieval.algorithms.fedavg import FedAvgConfig
from fed_retrieval.training import federated_loop
from fed_retrieval.training.loop_config import LOOP_DEFAULTS
from fed_retrieval.training.loop_config import LoopConfig
from losses.registry import ObjectiveConfig
from tasks.movielens import family as movielens_family
from tasks.movielens import settings as movielens_settings

_FEDAVG_FIELDS = {field.name for field in dataclasses.fields(FedAvgConfig)}


def fedavg_and_loop(fedavg_defaults: FedAvgConfig = FedAvgConfig(),
                    loop_defaults: LoopConfig = LoopConfig(),
                    **settings) -> Tuple[FedAvgConfig, LoopConfig]:
  """(FedAvgConfig, LoopConfig): the defaults with `settings`, each field to
  its config."""
  return (dataclasses.replace(fedavg_defaults, **{
      k: v for k, v in settings.items() if k in _FEDAVG_FIELDS}),
          dataclasses.replace(loop_defaults, **{
              k: v for k, v in settings.items() if k not in _FEDAVG_FIELDS}))


def movielens_settings_of(task, **settings) -> movielens_settings.MovieLensSettings:
  """The MovieLens family's settings for `task` with FedAvg and loop `settings`."""
  fedavg, loop = fedavg_and_loop(movielens_settings.FEDAVG_DEFAULTS,
                                 LOOP_DEFAULTS["movielens"], **settings)
  # A cap given serves every loss, as --max_local_steps does.
  hinge_cap = (None if "max_local_steps" in settings
               else movielens_settings.HINGE_MAX_LOCAL_STEPS)
  return movielens_settings.MovieLensSettings(task=task.config, fedavg=fedavg, loop=loop,
                                              hinge_max_local_steps=hinge_cap)


def train_movielens(task, output_dir: str, loss: str = "global_softmax",
                    **settings) -> Dict[str, Any]:
  """FedAvg (or FedSGD) of the dual encoder on `loss`, as the MovieLens family
  builds and the loop runs it, with FedAvg and loop `settings`."""
  config = movielens_settings_of(task, **settings)
  job = movielens_family.fedavg_job(task, config, ObjectiveConfig(loss),
                                    config.fedavg_for(loss))
  return federated_loop.run_federated(job, config.loop_for(loss), output_dir)


_LOOP_FIELDS = {field.name for field in dataclasses.fields(LoopConfig)}


def xc_settings_of(task_config, **settings):
  """The XC family's settings for `task_config`: loop fields to its loop (the
  XC defaults otherwise), the rest to `XCSettings`."""
  from tasks.xc.settings import XCSettings  # pylint: disable=g-import-not-at-top
  loop = dataclasses.replace(LOOP_DEFAULTS["xc"], **{
      k: v for k, v in settings.items() if k in _LOOP_FIELDS})
  return XCSettings(task_config, loop=loop, **{
      k: v for k, v in settings.items() if k not in _LOOP_FIELDS})


def train_xc(task, output_dir: str, algorithm: str, **settings) -> Dict[str, Any]:
  """`algorithm` on an XC task, as the XC family builds and the loop runs it."""
  from tasks.xc import family as xc_family  # pylint: disable=g-import-not-at-top
  config = xc_settings_of(task.config, **settings)
  return federated_loop.run_federated(xc_family.federated_job(task, config, algorithm),
                                      config.loop, output_dir)


def movielens_centralized_job(task, loss: str, split: str = "user",
                              jit_compile=None, **config):
  """The MovieLens family's centralized job of `loss` (`config`: its
  `CentralizedConfig`'s fields) and that config."""
  from fed_retrieval.training.centralized_loop import CentralizedConfig  # pylint: disable=g-import-not-at-top
  centralized = CentralizedConfig(jit_compile=jit_compile, **config)
  settings = movielens_settings.MovieLensSettings(task=task.config,
                                                  centralized=centralized)
  return (movielens_family.centralized_job(task, settings, ObjectiveConfig(loss),
                                           centralized, split), centralized)


def train_movielens_centrally(task, output_dir: str, loss: str, split: str = "user",
                              jit_compile=None, **config) -> Dict[str, Any]:
  """The dual encoder trained centrally on `loss`, as the MovieLens family
  builds it and the centralized loop runs it."""
  from fed_retrieval.training import centralized_loop  # pylint: disable=g-import-not-at-top
  job, centralized = movielens_centralized_job(task, loss, split, jit_compile, **config)
  return centralized_loop.run_centralized(job, centralized, output_dir)
