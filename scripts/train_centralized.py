r"""Centralized training, resumable: the reference of any task family.

  python -m scripts.train_centralized --synthetic=small --loss=hinge_spreadout \
      --centralized_max_epochs=3 --output_dir=runs/central_small
  python -m scripts.train_centralized --task=xc --synthetic_xc=xc_small \
      --xc_label_assignment=all --output_dir=runs/xc_reference
Writes metrics.csv, tensorboard/, checkpoint/, export/ and results.json in
--output_dir; re-running the same command after a kill resumes. MovieLens
trains on the centralized 90/10 split of examples unless --split_by=user (the
federated training users, validated on the federated users: --patience
applies).
"""

import json

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.training import centralized_loop
from fed_retrieval.training import centralized_flags
from fed_retrieval.training import federated_flags
from fed_retrieval.training import run_flags
from tasks import registry

flags.mark_flag_as_required("output_dir")


def main(argv) -> None:
  del argv
  family = registry.from_flags()
  run = family.centralized_run(
      centralized_flags.with_centralized_flags(family.settings_from_flags()))
  results = centralized_loop.run_centralized(run.job(), run.config,
                                             run_flags.OUTPUT_DIR.value)
  print(json.dumps(results, indent=2))


if __name__ == "__main__":
  cli.run(main, help_groups=[*registry.help_groups(),
                               centralized_flags.CENTRALIZED_FLAGS,
                               federated_flags.LOOP_FLAGS])
