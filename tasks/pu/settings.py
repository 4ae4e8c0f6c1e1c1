"""The settings of a PU run or comparison, and their defaults.

Defaults (README, "FedPU"): the paper's FedAvg (server SGD at 1.0) with
every client in every round, for a fixed 60 passes; client SGD 0.05. Local
work is sized to the clients' data (`PUSettings.loop_for`, unless
`size_local_work` is off, as when --batch_size or --local_epochs is given):
clients of `PAPER_CLIENT_POINTS` points or more on average (MNIST-sized data)
take the paper's one epoch over batches of 100; smaller ones (digits: 130-430
points, where an epoch of 100 would be a few steps, too few for the client
drift the paper's Baseline-1 suffers) five epochs over batches of 16. The
centralized reference is the same CNN trained on every training image with
its label (Adam, batch 64): what the clients' data holds when fully labeled.
"""

import dataclasses
from typing import Tuple

from fed_retrieval.algorithms.fedavg import FedAvgConfig
from fed_retrieval.training.centralized_loop import CentralizedConfig
from fed_retrieval.training.loop_config import LOOP_DEFAULTS
from fed_retrieval.training.loop_config import LoopConfig
from losses import pu_risk
from tasks.pu import pu_task

# Paper 001 trains one local epoch over batches of 100 on clients of 6,000 to
# 30,000 MNIST images; from clients of this many points on, so does a run.
PAPER_LOCAL_WORK = {"batch_size": 100, "local_epochs": 1}
PAPER_CLIENT_POINTS = 500
FEDAVG_DEFAULTS = FedAvgConfig(client_learning_rate=0.05, server_optimizer="sgd",
                                      server_learning_rate=1.0)
REFERENCE_DEFAULTS = CentralizedConfig(optimizer="adam", learning_rate=0.001,
                                       batch_size=64, epochs=60, min_passes=5.0,
                                       patience=5)


@dataclasses.dataclass(frozen=True)
class PUSettings:
  """A PU run or comparison: the data and the settings compared (name,
  `pu_task.PUSetting`), the method of one run or those of a comparison, the
  risk's options, the CNN, FedAvg, the loop and the centralized reference."""
  task: pu_task.PUTaskConfig
  settings: Tuple[Tuple[str, pu_task.PUSetting], ...] = ()
  method: str = "fedpu"
  methods: Tuple[str, ...] = pu_risk.METHODS
  surrogate: str = "probability"
  non_negative: bool = False
  conv_filters: Tuple[int, ...] = (32, 64)
  dense_units: int = 128
  fedavg: FedAvgConfig = FEDAVG_DEFAULTS
  loop: LoopConfig = LOOP_DEFAULTS["pu"]
  size_local_work: bool = True
  centralized: CentralizedConfig = REFERENCE_DEFAULTS

  def __post_init__(self):
    for method in (self.method, *self.methods):
      if method not in pu_risk.METHODS:
        raise ValueError(f"--methods: unknown method '{method}'; choose from "
                         f"{', '.join(pu_risk.METHODS)}")
    pu_risk.PURiskLoss(self.surrogate)  # Validates the surrogate.

  def loop_for(self, task: pu_task.PUTask) -> LoopConfig:
    """The loop with its local work sized to the task's clients (module
    docstring): what a run records and trains with."""
    loop = self.loop.for_clients(task.num_clients())
    if self.size_local_work and task.mean_client_points() >= PAPER_CLIENT_POINTS:
      return dataclasses.replace(loop, **PAPER_LOCAL_WORK)
    return loop

  def loss(self) -> pu_risk.PURiskLoss:
    """The risk every method trains (the baselines' coefficients make it
    cross-entropy on their points)."""
    return pu_risk.PURiskLoss(self.surrogate, self.non_negative)
