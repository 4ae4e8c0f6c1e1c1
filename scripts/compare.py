r"""The main job: a task family's federated runs beside centralized references
and a trivial baseline, every run converged.

  python -m scripts.compare --synthetic=ml1m --output_dir=runs/compare \
      [--losses=batch_softmax,hinge_spreadout] [--include_fedsgd] [--seeds=0,1,2]
  python -m scripts.compare --task=xc --xc_train_path=TRAIN.txt \
      --xc_test_path=TEST.txt --output_dir=runs/xc [--partition=k_labels_per_client \
      --algorithms=fedss,neg_only,pos_only,full_softmax]
  python -m scripts.compare --task=pu --pu_data=digits --output_dir=runs/pu \
      [--pu_settings=iid_10x1,noniid2_10x1] [--methods=fedpu,positive_only]
Trains (or resumes) each run in a directory of --output_dir and each
centralized reference once for every comparison of the same data and settings
(--references_dir), then writes results.csv, results.md (the table with the
command and the commit that made it), curves.png (validation curves) and,
where clients move bytes, quality_vs_bytes.png. With --seeds, a comparison
per seed in --output_dir/seed_<s> and, in --output_dir, each run's mean and
standard error over the seeds.
"""

import os
import sys
from typing import List

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.reports import comparison
from fed_retrieval.reports import result_files
from fed_retrieval.reports import seed_summary
from fed_retrieval.training import centralized_flags
from fed_retrieval.training import federated_flags
from fed_retrieval.training import run_directory
from fed_retrieval.training import run_flags
from tasks import registry

_REFERENCES_DIR = flags.DEFINE_string(
    "references_dir", None,
    "Where the centralized references are trained, once for every comparison on "
    "the same data and settings (default: references/ beside --output_dir); the "
    "comparison links them.")
_SEEDS = flags.DEFINE_list(
    "seeds", [],
    "Run the whole comparison once per seed (each as with --seed, in "
    "--output_dir/seed_<s>) and report each run's mean and standard error over "
    "them beside each seed's value (default: once, at --seed).")
flags.mark_flag_as_required("output_dir")


def _seeds() -> List[int]:
  try:
    seeds = [int(s) for s in _SEEDS.value]
  except ValueError:
    raise ValueError(f"--seeds: integers, got {','.join(_SEEDS.value)}") from None
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"--seeds: each seed once, got {','.join(_SEEDS.value)}")
  if seeds and flags.FLAGS[run_flags.SEED.name].present:
    raise ValueError("--seeds runs the comparison at each of its seeds; drop --seed")
  return seeds


def _compare(family, output_dir: str) -> List[comparison.Row]:
  """The comparison the flags describe, trained and reported in `output_dir`."""
  settings = centralized_flags.with_centralized_flags(family.settings_from_flags())
  rows = comparison.run_comparison(family, settings, output_dir, _REFERENCES_DIR.value)
  print(comparison.write_reports(rows, family, settings, output_dir,
                                 result_files.command_line()))
  return rows


def main(argv) -> None:
  del argv
  family = registry.from_flags()
  output_dir = run_flags.OUTPUT_DIR.value
  seeds = _seeds()
  if not seeds:
    _compare(family, output_dir)
  else:
    rows_by_seed = {}
    for seed in seeds:
      flags.FLAGS[run_flags.SEED.name].parse(str(seed))  # As --seed=<seed> would.
      rows_by_seed[seed] = _compare(
          family, os.path.join(output_dir, seed_summary.seed_dir_name(seed)))
    settings = family.settings_from_flags()
    print(seed_summary.write_reports(
        rows_by_seed, family.headline(settings), family.relative_gaps, family.name,
        output_dir, result_files.command_line()))
  print(f"comparison: {run_directory.contents_line(output_dir)}", file=sys.stderr)


if __name__ == "__main__":
  cli.run(main, help_groups=[*registry.help_groups(),
                               centralized_flags.CENTRALIZED_FLAGS,
                               *federated_flags.ALL_FLAGS])
