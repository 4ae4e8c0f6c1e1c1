"""The settings of an XC run or comparison, and their defaults."""

import dataclasses
from typing import Optional, Tuple

from fed_retrieval import top_k_index
from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.models import xc_encoder
from fed_retrieval.training.centralized_loop import CentralizedConfig
from fed_retrieval.training.loop_config import LOOP_DEFAULTS
from fed_retrieval.training.loop_config import LoopConfig
from tasks.xc import xc_task

ALGORITHMS = fedaws.ALGORITHMS + fedss.ALGORITHMS
ARCHITECTURES = {
    "linear": xc_encoder.LINEAR_ARCHITECTURE,
    "residual": xc_encoder.RESIDUAL_ARCHITECTURE,
    "small": dict(bag_dim=64, hidden_dims=(128,), embedding_dim=64),
    "paper": xc_encoder.PAPER_ARCHITECTURE,
}
# The references: full softmax with Adam, batch 64, evaluated once a pass.
REFERENCE_DEFAULTS = CentralizedConfig(optimizer="adam", learning_rate=0.001,
                                       batch_size=64, epochs=100, min_passes=5.0,
                                       patience=5)


@dataclasses.dataclass(frozen=True)
class XCSettings:
  """Everything an XC run or comparison is: the data, the model (its
  `architecture`, its `scoring`, cosine `logit_scale`, and whether a client
  receives only the embedding-bag rows of its features, `bag`), the
  algorithms' settings, client-level DP of the dense tower (the oracle's and
  full softmax's whole model; selected rows are not covered), the loop and
  the references."""
  task: xc_task.XCTaskConfig
  algorithm: str = "fedaws"  # The one run of train_federated.
  algorithms: Tuple[str, ...] = fedaws.ALGORITHMS  # A comparison's.
  architecture: str = "linear"
  # `xc_encoder.SCORINGS`, None: cosine; FedSS's family may take dot.
  scoring: Optional[str] = None
  logit_scale: float = 10.0
  bag: str = "selected"
  fedaws: FedAwSConfig = FedAwSConfig()
  fedss: FedSSConfig = FedSSConfig()
  dp: Optional[differential_privacy.DPConfig] = None
  loop: LoopConfig = LOOP_DEFAULTS["xc"]
  centralized: CentralizedConfig = REFERENCE_DEFAULTS
  references: bool = True  # A comparison trains the centralized references.
  # Towers besides `architecture` that a comparison's all-labels reference is
  # also trained with: the ceiling of a stronger centralized model.
  reference_architectures: Tuple[str, ...] = ("residual",)
  index: str = "auto"  # The top-k index of evaluation (`top_k_index.resolve_kind`).
  index_recall: float = top_k_index.TARGET_RECALL  # An approximate one's target.

  def __post_init__(self):
    for flag, names in (("xc_architecture", (self.architecture,)),
                        ("xc_reference_architectures", self.reference_architectures)):
      for name in names:
        if name not in ARCHITECTURES:
          raise ValueError(f"--{flag} must be one of {', '.join(ARCHITECTURES)}, "
                           f"got '{name}'")
    fedaws.check_bag(self.bag)
    xc_encoder.check_scoring(self.scoring)
    top_k_index.resolve_kind(self.index, 0)  # Refuses an unknown kind.
    for algorithm in (self.algorithm, *self.algorithms):
      if algorithm not in ALGORITHMS:
        raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)} for the "
                         f"XC task, got '{algorithm}'")

  def check(self, algorithm: str) -> None:
    """Refuses an algorithm these settings cannot run (before any run trains)."""
    if algorithm not in ALGORITHMS:
      raise ValueError(f"--algorithm must be one of {', '.join(ALGORITHMS)} for the "
                       f"XC task, got '{algorithm}'")
    if algorithm in fedaws.OWN_ALGORITHMS:
      fedaws.require_cosines(self.scoring, algorithm)
    if self.dp is None:
      return
    differential_privacy.check_compatible(self.loop, self.dp)
    if self.dp.clipping != "fixed":
      raise ValueError(f"--dp_clipping={self.dp.clipping}: --algorithm={algorithm} "
                       "clips at a fixed --clip_norm (adaptive: FedAvg and FedSGD, "
                       "MovieLens and PU)")
    if (self.bag == "selected" and algorithm not in ("softmax_oracle", "full_softmax")
        and not ARCHITECTURES[self.architecture].get("dense_layers", True)):
      raise ValueError(f"--noise_multiplier: with --xc_architecture={self.architecture} "
                       "and --xc_bag=selected every weight a client updates is a selected "
                       "row, which DP does not cover; give --xc_bag=whole (the bag is "
                       "then dense and private) or a tower with dense layers")
