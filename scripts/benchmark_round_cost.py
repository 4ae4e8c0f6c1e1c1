r"""Seconds per round, process-tree memory and bytes of FedAwS or FedSS at
label-space sizes.

  python -m scripts.benchmark_round_cost --algorithm=fedaws \
      --num_classes=10000,670091 --num_features=135909
Prints one JSON object: seconds per round, `memory` (peak RSS of the process
tree, the TFF worker included), bytes down and up per client and their share
of the model; FedAwS adds how its spreadout found neighbours and their recall.
Several --num_classes, --local_workers, --local_spreadout_shards or
--local_table_servers run one after another, each in a child process of its
own (its memory its own), and print {"runs": [...],
"seconds_ratio_to_first": [...]}: side by side in one sitting. With
--sittings=N the configurations run in turn N times, so a machine's drift
falls on each alike: the ratios are the median of the sittings' own (each
sitting's seconds and ratios are printed; "runs" are the first sitting's).
Each configuration's timed rounds follow --warmup_rounds untimed ones, by
default as many as the most workers of --local_workers.
On several workers each run states the CPU seconds a round of the driver
and of each worker (and the kernel's part of each worker's), and a digest
of the weights (the same on any number of workers); with
--local_spreadout_shards, of each shard of FedAwS's index; with
--local_table_servers (FedSS), of each server of the class table.
With one worker and several among --local_workers, `busiest_worker_cpu_share`
gives each several-worker run's busiest worker's CPU over the one worker's,
and `workers_cpu_total_share` its workers' CPU summed over the one worker's
(the split's cost; the median over sittings, each sitting's too). Every run
states its round modelled on as many machines as workers, each with its
worker and a share of the shards (`modelled_round`: the driver's CPU
seconds plus the busiest machine's), and `driver_share_of_modelled_round`
the driver's share of it (the median over sittings; each sitting's too).
`make benchmark-round-cost` runs both algorithms at 10k, 100k and 670k
classes (Amazon-670K's 135,909 features) with the same clients, the
contrasts at 100k, and 4,000 clients a round on 1 and 3 workers with the
spreadout's index on the driver or on shards.
"""

import json
import os
import traceback

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags
import numpy as np

from fed_retrieval.algorithms import class_neighbours
from fed_retrieval.algorithms import fedaws
from fed_retrieval.reports import page_flag
from fed_retrieval.reports import result_files
from fed_retrieval.reports import round_cost_benchmark
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.runtime import worker_threads
from fed_retrieval.training import round_calls

_NUM_CLASSES = flags.DEFINE_list(
    "num_classes", ["10000"], "Classes (table rows); several: each in its own process.")
_ALGORITHM = flags.DEFINE_enum("algorithm", "fedss", list(round_cost_benchmark.ALGORITHMS),
                               "The FedAwS or FedSS algorithm to time.")
_BAG = flags.DEFINE_enum("bag", "selected", list(fedaws.BAGS),
                         "Clients receive their features' bag rows or the whole bag.")
_NUM_NEGATIVES = flags.DEFINE_integer("num_negatives", 500,
                                      "Negatives each FedSS client samples.")
_NUM_FEATURES = flags.DEFINE_integer("num_features", 20_000, "Sparse input features.")
_CLIENTS = flags.DEFINE_integer("clients_per_round", 100, "Clients in the round.")
_CLASSES_PER_CLIENT = flags.DEFINE_integer("classes_per_client", 10,
                                           "Classes of each client's points.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Timed rounds after the warm-up rounds.")
_WARMUP_ROUNDS = flags.DEFINE_integer(
    "warmup_rounds", None,
    "Untimed rounds first (default: the most of --local_workers): a worker's CPU "
    "a call falls over its first calls, and on N workers each takes 1/N of a "
    "round's calls. Every configuration warms up alike, so their weights compare.")
_SPREADOUT_SEARCH = flags.DEFINE_enum(
    "spreadout_search", "exact", list(class_neighbours.SEARCHES),
    "FedAwS: how the spreadout finds each class's neighbours (exact: every class "
    "scored; approximate: an inverted file kept across rounds).")
_LOCAL_WORKERS = flags.DEFINE_list(
    "local_workers", ["1"],
    "TFF workers on this machine the round's calls are spread over (what as many "
    "machines would do); several counts: each in its own process.")
_SPREADOUT_SHARDS = flags.DEFINE_list(
    "local_spreadout_shards", ["0"],
    "FedAwS, approximate spreadout: the index's lists in this many local "
    "scripts.spreadout_shard processes (what shards beside workers on as many "
    "machines do; their CPU stated); 0: in the driver; several counts: each in "
    "its own process.")
_TABLE_SERVERS = flags.DEFINE_list(
    "local_table_servers", ["0"],
    "FedSS: the class table in this many local scripts.table_server processes, in "
    "ranges (what servers beside workers on as many machines do; their CPU "
    "stated); 0: in the driver; several counts: each in its own process.")
_ONE_CALL_AT_A_TIME = flags.DEFINE_bool(
    "one_call_at_a_time", False,
    "Several local workers take their calls in turn, not at once, and the rows a "
    "round moved in FedAwS's approximate index are placed before the next round's "
    "calls: each worker's CPU seconds without another worker's call or the index's "
    "work beside it on this machine's cores (the results are the same).")
_SITTINGS = flags.DEFINE_integer(
    "sittings", 1, "Times the configurations run in turn; the ratios are the median "
    "of each sitting's.")
_CLIENT_SHARDS = flags.DEFINE_integer(
    "client_shards", worker_threads.DEFAULT_CLIENT_SHARDS,
    "Shards of the round's clients, as a run computes them (--client_shards; a "
    f"shard holds at most {round_calls.MAX_CLIENTS_PER_SHARD} clients); 0: a TFF "
    "client per client.")


def _counts(holder: flags.FlagHolder, least: int) -> list:
  """The integers of a list flag, each >= `least`."""
  try:
    counts = [int(n) for n in holder.value]
  except ValueError as e:
    raise ValueError(f"--{holder.name}: {e}") from e
  if not counts or min(counts) < least:
    raise ValueError(f"--{holder.name}: each must be >= {least}, got {holder.value}")
  return counts


def _warmup_rounds() -> int:
  """--warmup_rounds, by default the most workers of --local_workers."""
  rounds = _WARMUP_ROUNDS.value
  rounds = max(_counts(_LOCAL_WORKERS, 1)) if rounds is None else rounds
  if rounds < 1:
    raise ValueError(f"--warmup_rounds must be >= 1, got {rounds}")
  return rounds


def _report(num_classes: int, workers: int, shards: int, table_servers: int) -> dict:
  """The report of one configuration, in this process."""
  return round_cost_benchmark.round_benchmark(
      num_classes, _ALGORITHM.value, _BAG.value, _NUM_NEGATIVES.value,
      _NUM_FEATURES.value, _CLIENTS.value, classes_per_client=_CLASSES_PER_CLIENT.value,
      repeats=_REPEATS.value, spreadout_search=_SPREADOUT_SEARCH.value, workers=workers,
      client_shards=_CLIENT_SHARDS.value, spreadout_shards=shards,
      one_call_at_a_time=_ONE_CALL_AT_A_TIME.value, warmup_rounds=_warmup_rounds(),
      table_servers=table_servers)


def _in_child(num_classes: int, workers: int, shards: int, table_servers: int) -> dict:
  """The report of one configuration from a forked child that dies with this
  process: its memory its own, without a new interpreter's imports (this
  process has run no TensorFlow op, so the child starts as a clean one)."""
  read_end, write_end = os.pipe()
  pid = os.fork()
  if pid == 0:  # The child: the report or the error's traceback down the pipe.
    os.close(read_end)
    try:
      tff_runtime.die_with_parent()
      answer = {"report": _report(num_classes, workers, shards, table_servers)}
    except BaseException:  # pylint: disable=broad-except
      answer = {"error": traceback.format_exc()}
    with os.fdopen(write_end, "w") as pipe:
      json.dump(answer, pipe)
    os._exit(0)  # Not the parent's atexit handlers; the run stopped its workers.
  os.close(write_end)
  with os.fdopen(read_end) as pipe:
    text = pipe.read()
  os.waitpid(pid, 0)
  answer = json.loads(text) if text else {"error": "the child died without a report"}
  if "error" in answer:
    raise RuntimeError(f"the run at {num_classes} classes on {workers} workers and "
                       f"{shards} spreadout shards and {table_servers} table servers "
                       "failed: "
                       f"{answer['error'].strip()[-2000:]}")
  return answer["report"]


def _add_medians(report: dict, name: str, by_sitting: list) -> None:
  """`report[name]`: each configuration's median of a figure over the
  sittings (`by_sitting`: a list per sitting, None for a configuration
  without one); with several sittings, each sitting's too."""
  report[name] = [None if column[0] is None else round(float(np.median(column)), 3)
                  for column in zip(*by_sitting)]
  if len(by_sitting) > 1:
    report[f"{name}_by_sitting"] = by_sitting


def main(argv) -> None:
  del argv
  configurations = [(n, w, s, t) for n in _counts(_NUM_CLASSES, 2)
                    for w in _counts(_LOCAL_WORKERS, 1)
                    for s in _counts(_SPREADOUT_SHARDS, 0)
                    for t in _counts(_TABLE_SERVERS, 0)]
  if _SITTINGS.value < 1:
    raise ValueError(f"--sittings must be >= 1, got {_SITTINGS.value}")
  _warmup_rounds()  # Refused before any configuration runs.
  if len(configurations) == 1 and _SITTINGS.value == 1:
    report = _report(*configurations[0])
  else:
    sittings = [[_in_child(*configuration) for configuration in configurations]
                for _ in range(_SITTINGS.value)]
    seconds = np.array([[r["seconds_per_round_min"] for r in runs] for runs in sittings])
    ratios = seconds / seconds[:, :1]
    report = {"runs": sittings[0], "seconds_ratio_to_first": [
        round(float(r), 2) for r in np.median(ratios, axis=0)]}
    if len(sittings) > 1:
      report["seconds_per_round_min_by_sitting"] = seconds.tolist()
      report["seconds_ratio_by_sitting"] = np.round(ratios, 2).tolist()
    for name, combine in (("busiest_worker_cpu_share", max),
                          ("workers_cpu_total_share", sum)):
      shares = [round_cost_benchmark.worker_cpu_shares(runs, combine)
                for runs in sittings]
      if any(share is not None for share in shares[0]):
        _add_medians(report, name, shares)
    _add_medians(report, "driver_share_of_modelled_round",
                 [[r["modelled_round"]["driver_share"] for r in runs] for runs in sittings])
  print(json.dumps(report, indent=2))
  result_files.write_report_page(page_flag.PAGE.value, "Sub-model round cost", report)


if __name__ == "__main__":
  cli.run(main, help_groups=[page_flag.HELP_GROUP])
