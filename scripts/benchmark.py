r"""Throughput of every federated algorithm and of centralized Keras against a tight loop.

  python -m scripts.benchmark --synthetic=ml1m \
      --losses=batch_softmax,hinge_spreadout,global_softmax --include_fedsgd
  python -m scripts.benchmark --task=xc --synthetic_xc=xc_small --algorithms=fedaws,fedss
  python -m scripts.benchmark --task=pu --pu_data=digits --pu_settings=iid_5x2 \
      --methods=fedpu
  python -m scripts.benchmark --synthetic=ml1m --losses=global_softmax \
      --local_workers=1,2,3
  python -m scripts.benchmark --task=pu --pu_data=mnist --mnist_path=/tmp/mnist10k \
      --mnist_shaped=10000 --pu_settings=iid_5x2 --methods=fedpu
Measures the federated runs of the comparison the flags describe (its first
setting). For each workload (an algorithm on the task, with the federated
flags given),
--repeats trials, each: federated examples/s over --timed_rounds rounds (after
--warmup_rounds once), then at once centralized Keras `fit` on as many of the
same clients' pooled examples (the best of --steps_per_execution), a tight
loop (SGD steps of the same model and loss over batches in memory, in place,
the best of with and without XLA) and the same loop through Keras's SGD, and
the trial's fractions of the tight loops. Reports the medians over the
trials with each fraction's range, seconds a round and the peak memory of
the process tree (the TFF worker included). Prints a markdown table, then the
JSON report (every trial in it); --output writes the JSON.
"""

import json
import os

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval.reports import page_flag
from fed_retrieval.reports import result_files
from fed_retrieval.reports import throughput
from fed_retrieval.training import federated_flags
from fed_retrieval.training import run_directory
from tasks import registry
from tasks.pu import image_io

_TIMED_ROUNDS = flags.DEFINE_integer("timed_rounds", 10, "Timed federated rounds a trial.")
_WARMUP_ROUNDS = flags.DEFINE_integer(
    "warmup_rounds", 5,
    "Untimed federated rounds first: the first traces, and on xc_small the "
    "next three still took 1.1-1.8x a steady round.")
_STEPS_PER_EXECUTION = flags.DEFINE_list(
    "steps_per_execution", ["100"],
    "Batches a Keras step trains centrally (as the centralized runs' "
    "steps_per_execution, 100); with several values the best counts.")
_MNIST_SHAPED = flags.DEFINE_integer(
    "mnist_shaped", 0,
    "--task=pu: first write this many random 28x28 images in MNIST's IDX files "
    "(t10k up to 10,000, the rest as train) into --mnist_path, a new directory, "
    "and measure on them (--pu_data=mnist): MNIST's cost without its files.")
_LOCAL_WORKERS = flags.DEFINE_list(
    "local_workers", [],
    "Also time the rounds with the clients split across this many local TFF "
    "workers (TFF's mergeable context, as --workers does), e.g. 1,2,3.")
_BREAKDOWN = flags.DEFINE_bool(
    "breakdown", False,
    "Also say where a round's time goes: a fixed part, per client, per batch, "
    "and building the datasets (milliseconds, one local worker).")
_REPEATS = flags.DEFINE_integer(
    "repeats", 3,
    "Trials a workload: each times --timed_rounds federated rounds, then at once "
    "centralized and the tight loops on as many examples; each fraction is "
    "taken within a trial and reported as the median with its range (this "
    "machine's speed moved by up to 40% between the minutes of one run).")
_OUTPUT = flags.DEFINE_string("output", None, "Also write the JSON report here.")


def workloads():
  """The workloads the flags ask for: the federated runs of the comparison they
  describe (its first setting)."""
  family = registry.from_flags()
  if _MNIST_SHAPED.value:
    write_mnist_shaped(_MNIST_SHAPED.value)
  return [throughput.workload(run)
          for run in family.comparison(family.settings_from_flags())[0].federated]


def write_mnist_shaped(num_images: int) -> None:
  """MNIST-shaped files in --mnist_path, which must be new or empty."""
  directory = flags.FLAGS.mnist_path
  if flags.FLAGS.pu_data != "mnist" or not directory:
    raise ValueError("--mnist_shaped needs --pu_data=mnist and --mnist_path=<new directory>")
  if os.path.isdir(directory) and os.listdir(directory):
    raise ValueError(f"--mnist_path={directory}: not empty; --mnist_shaped writes "
                     "its own files into a new directory")
  image_io.write_mnist_shaped(directory, num_images)


def main(argv) -> None:
  del argv
  try:
    spe = [int(s) for s in _STEPS_PER_EXECUTION.value]
  except ValueError as e:
    raise ValueError(f"--steps_per_execution: {e}") from e
  try:
    local_workers = [int(n) for n in _LOCAL_WORKERS.value]
  except ValueError as e:
    raise ValueError(f"--local_workers: {e}") from e
  if _TIMED_ROUNDS.value < 1 or _WARMUP_ROUNDS.value < 1:
    raise ValueError("--timed_rounds and --warmup_rounds must be >= 1 (the first "
                     f"round traces), got {_TIMED_ROUNDS.value} and {_WARMUP_ROUNDS.value}")
  if _REPEATS.value < 1:
    raise ValueError(f"--repeats must be >= 1, got {_REPEATS.value}")
  rows = []
  for workload in workloads():
    rows.append(throughput.measure(workload, _TIMED_ROUNDS.value, spe, local_workers,
                                   _REPEATS.value, _WARMUP_ROUNDS.value))
    if _BREAKDOWN.value:
      rows[-1]["round_breakdown"] = throughput.round_breakdown(workload)
  report = throughput.report(rows)
  print(throughput.markdown_table(rows))
  print(json.dumps(report, indent=2))
  result_files.write_report_page(page_flag.PAGE.value, "Throughput", report,
                                 throughput.markdown_table(rows))
  if _OUTPUT.value:
    run_directory.write_json(_OUTPUT.value, report)


if __name__ == "__main__":
  cli.run(main, help_groups=[
      *registry.help_groups(),
      *federated_flags.ALL_FLAGS,
      ("Benchmark", None, (_TIMED_ROUNDS, _WARMUP_ROUNDS, _STEPS_PER_EXECUTION,
                           _MNIST_SHAPED, _LOCAL_WORKERS, _BREAKDOWN, _REPEATS, _OUTPUT,
                           page_flag.PAGE))])
