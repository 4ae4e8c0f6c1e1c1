"""The round-cost benchmark script: figures present and consistent (no timing targets)."""

import json
import threading
import types

import numpy as np
import pytest

from fed_retrieval.algorithms import class_neighbours
from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.models import xc_encoder
from fed_retrieval.reports import round_cost_benchmark
from tests.script_runs import run_module


def check_figures(report, algorithm, bag, num_classes):
  """Tree memory, and bytes as the algorithm's own accounting gives them."""
  assert report["memory"]["processes"] >= 2  # Python and the TFF worker.
  assert report["memory"]["peak_rss_mb"] > 0
  assert report["seconds_per_round_min"] > 0
  model = xc_encoder.XCEncoderConfig(500, num_classes, bag_dim=64, hidden_dims=(128,),
                                     embedding_dim=64)
  model_floats = sum(np.prod(s) for s in model.weight_shapes())
  assert report["model_bytes"] == 4 * (model_floats + num_classes * 64)
  if bag == "whole":
    expected = fedss.bytes_per_client(model.weight_shapes(), num_classes, 64, FedSSConfig(
        num_negatives=20, positives_per_client=3))
    assert (report["bytes_down_per_client"], report["bytes_up_per_client"]) == expected
  else:  # The dense layers, 3 class rows and the bag rows of <= 100 points' features.
    dense = sum(np.prod(s) for s in model.weight_shapes()[1:])
    bag_rows = (report["bytes_down_per_client"] / 4 - dense - 3 * 64) / 64
    assert bag_rows == int(bag_rows) and 1 < bag_rows <= 501
  assert report["down_share_of_model"] == pytest.approx(
      report["bytes_down_per_client"] / report["model_bytes"], abs=1e-5)
  assert report["algorithm"] == algorithm


def benchmark(*flags):
  """The script's report on a tiny shape: 500 features, 4 clients of 3
  classes, one timed round."""
  result = run_module("scripts.benchmark_round_cost", "--num_features=500",
                      "--clients_per_round=4", "--classes_per_client=3", "--repeats=1",
                      *flags)
  assert result.returncode == 0, result.stderr[-3000:]
  return json.loads(result.stdout)


def test_the_round_cost_script_reports_tree_memory_and_bytes():
  report = benchmark("--algorithm=fedss", "--bag=whole", "--num_classes=300",
                     "--num_negatives=20", "--client_shards=0")
  check_figures(report, "fedss", "whole", 300)
  assert report["tff_clients"] == 4  # A TFF client per client.


@pytest.mark.runs_long
def test_sizes_side_by_side_each_in_its_own_process_with_the_spreadouts_recall():
  report = benchmark("--algorithm=fedaws", "--num_classes=300,600",
                     "--spreadout_search=approximate", "--local_workers=2")
  assert [r["num_classes"] for r in report["runs"]] == [300, 600]
  seconds = [r["seconds_per_round_min"] for r in report["runs"]]
  assert report["seconds_ratio_to_first"] == [1.0, round(seconds[1] / seconds[0], 2)]
  for run, num_classes in zip(report["runs"], (300, 600)):
    check_figures(run, "fedaws", "selected", num_classes)
    assert run["tff_clients"] == 2  # As a run computes them: two shards.
    assert run["memory"]["processes"] == 3  # Python and its two TFF workers.
    cpu = run["cpu_seconds_per_round"]
    assert cpu["driver"] > 0 and len(cpu["workers"]) == 2 and cpu["workers"][0] > 0
    assert 0 <= cpu["memory_sampler"] < cpu["driver"]  # Counted apart.
    kernel = run["kernel_cpu_seconds_per_round"]
    assert sorted(kernel) == ["workers"]  # No shards; the driver's holds the sampler's.
    # A part of each worker's CPU (at clock ticks of 10 ms).
    assert all(0 <= k <= c for k, c in zip(kernel["workers"], cpu["workers"]))
    assert len(run["weights_sha1"]) == 40
    assert run["spreadout_search"] == "approximate"
    # 69 and 98 lists, 64 of them scanned: most neighbours found, and those
    # missed nearly as close.
    found = run["spreadout_neighbours"]
    assert 0.5 < found["recall"] <= 1.0
    assert 0.8 * found["mean_cosine_exact"] < found["mean_cosine_found"] <= found[
        "mean_cosine_exact"] + 1e-6


def test_the_spreadouts_index_on_shard_processes_trains_as_the_index_here():
  flags = ["--algorithm=fedaws", "--num_classes=300", "--spreadout_search=approximate"]
  here, sharded = benchmark(*flags, "--local_spreadout_shards=0,2")["runs"]
  check_figures(sharded, "fedaws", "selected", 300)
  assert sharded["weights_sha1"] == here["weights_sha1"]
  assert sharded["memory"]["processes"] == 4  # Python, its TFF worker, two shards.
  wire, wire_here = sharded["wire_bytes_per_round"], here["wire_bytes_per_round"]
  assert sorted(wire_here) == ["from_workers", "to_workers"]
  # The rows each shard moves go to it and their neighbours' ids come back.
  assert [len(wire[k]) for k in ("to_spreadout_shards", "from_spreadout_shards")] == [2, 2]
  assert min(wire["to_spreadout_shards"] + wire["from_spreadout_shards"]) > 0
  # A call's uploads of 4 clients (3 class rows of 64 floats each, at least),
  # the same calls wherever the index lives (to within a few bytes).
  assert wire["from_workers"][0] > 4 * 3 * 64 * 4
  for key in wire_here:
    np.testing.assert_allclose(wire[key], wire_here[key], atol=100)
  assert len(sharded["cpu_seconds_per_round"]["spreadout_shards"]) == 2
  assert all(0 <= k <= c for k, c in zip(
      sharded["kernel_cpu_seconds_per_round"]["spreadout_shards"],
      sharded["cpu_seconds_per_round"]["spreadout_shards"]))
  assert "spreadout_shards" not in here["cpu_seconds_per_round"]
  assert (sharded["spreadout_shards"], "spreadout_shards" in here) == (2, False)
  refused = run_module("scripts.benchmark_round_cost", "--algorithm=fedss",
                       "--local_spreadout_shards=2")
  assert refused.returncode == 2
  assert refused.stderr.strip().splitlines()[-1] == (
      "error: --local_spreadout_shards: FedAwS with --spreadout_search=approximate only")


def test_fedss_class_table_on_server_processes_trains_as_the_table_here():
  flags = ["--algorithm=fedss", "--num_classes=300", "--num_negatives=20"]
  here, served = benchmark(*flags, "--local_table_servers=0,2")["runs"]
  assert served["weights_sha1"] == here["weights_sha1"]
  assert served["memory"]["processes"] == 4  # Python, its TFF worker, two servers.
  assert (served["table_servers"], "table_servers" in here) == (2, False)
  assert len(served["cpu_seconds_per_round"]["table_servers"]) == 2
  wire, wire_here = served["wire_bytes_per_round"], here["wire_bytes_per_round"]
  # The driver sends the workers no class rows, receives no class sums, and
  # gets each server's range of the table: 150 rows of 64 floats.
  assert wire["to_workers"][0] < wire_here["to_workers"][0]
  assert wire["from_workers"][0] < wire_here["from_workers"][0]
  assert min(wire["from_table_servers"]) > 150 * 64 * 4
  # Each server sends its class rows a worker reads and receives their sums.
  assert min(wire["table_servers_to_workers"] + wire["table_servers_from_workers"]) > 0
  refused = run_module("scripts.benchmark_round_cost", "--algorithm=fedaws",
                       "--local_table_servers=2")
  assert refused.returncode == 2
  assert refused.stderr.strip().splitlines()[-1] == (
      "error: --local_table_servers: FedSS only (FedAwS's spreadout step reads the "
      "whole table each round)")


def test_sittings_run_the_configurations_in_turn_and_give_the_median_ratio():
  report = benchmark("--algorithm=fedss", "--num_classes=300,600", "--num_negatives=20",
                     "--sittings=3")
  seconds = np.array(report["seconds_per_round_min_by_sitting"])
  assert seconds.shape == (3, 2) and (seconds > 0).all()
  ratios = seconds / seconds[:, :1]
  np.testing.assert_allclose(report["seconds_ratio_by_sitting"], ratios, atol=0.005)
  assert report["seconds_ratio_to_first"] == [1.0, round(float(np.median(ratios[:, 1])), 2)]
  assert [r["num_classes"] for r in report["runs"]] == [300, 600]  # The first sitting's.
  assert report["runs"][0]["seconds_per_round_min"] == seconds[0, 0]


def test_the_workers_shares_are_of_the_one_worker_at_the_same_classes_and_shards():
  def run(classes, workers, cpu, shards=0):
    return {"num_classes": classes, "workers": workers, "spreadout_shards": shards,
            "cpu_seconds_per_round": {"workers": cpu}}

  runs = [run(300, 1, [2.0]), run(300, 3, [0.6, 0.9, 0.5]), run(300, 1, [4.0], shards=2),
          run(300, 3, [1.0, 1.2, 1.1], shards=2), run(600, 3, [1.0, 1.0, 1.0])]
  assert round_cost_benchmark.worker_cpu_shares(runs) == [None, 0.45, None, 0.3, None]
  assert round_cost_benchmark.worker_cpu_shares(runs, sum) == [
      None, 1.0, None, 0.825, None]


def test_the_modelled_round_adds_the_busiest_machine_to_the_driver():
  """Machine i: worker i and the shards j with j mod W = i."""
  one = {"driver": 1.0, "memory_sampler": 0.1, "workers": [8.0],
         "spreadout_shards": [2.0, 2.0, 2.0]}
  assert round_cost_benchmark.modelled_round(one) == {"seconds": 15.0,
                                                      "driver_share": round(1 / 15, 3)}
  three = {"driver": 0.5, "workers": [3.0, 3.5, 2.0], "spreadout_shards": [1.0, 0.5, 2.0]}
  # Machines 4.0, 4.0, 4.0: the shards even out the workers.
  assert round_cost_benchmark.modelled_round(three) == {"seconds": 4.5, "driver_share": 0.111}
  two = {"driver": 0.5, "workers": [3.0, 3.5], "spreadout_shards": [1.0, 0.5, 2.0]}
  assert round_cost_benchmark.modelled_round(two)["seconds"] == 6.5  # 3 + 1 + 2 = 6.
  assert round_cost_benchmark.modelled_round(
      {"driver": 2.0, "workers": [6.0, 4.0]}) == {"seconds": 8.0, "driver_share": 0.25}


@pytest.mark.runs_long
def test_one_and_two_workers_in_sittings_give_the_busiest_workers_median_share():
  report = benchmark("--algorithm=fedss", "--num_classes=300", "--num_negatives=20",
                     "--local_workers=1,2", "--sittings=2")
  by_sitting = report["busiest_worker_cpu_share_by_sitting"]
  assert [share is None for share in by_sitting[0]] == [True, False]
  assert report["busiest_worker_cpu_share"] == [
      None, round(float(np.median([shares[1] for shares in by_sitting])), 3)]
  one, two = report["runs"]
  assert by_sitting[0][1] == round(max(two["cpu_seconds_per_round"]["workers"]) /
                                   one["cpu_seconds_per_round"]["workers"][0], 3)
  total = report["workers_cpu_total_share_by_sitting"]
  assert total[0] == [None, round(sum(two["cpu_seconds_per_round"]["workers"]) /
                                  one["cpu_seconds_per_round"]["workers"][0], 3)]
  assert report["workers_cpu_total_share"] == [
      None, round(float(np.median([shares[1] for shares in total])), 3)]
  driver_shares = report["driver_share_of_modelled_round_by_sitting"]
  assert driver_shares[0] == [r["modelled_round"]["driver_share"] for r in (one, two)]
  assert report["driver_share_of_modelled_round"] == [
      round(float(np.median(column)), 3) for column in zip(*driver_shares)]
  assert two["modelled_round"] == round_cost_benchmark.modelled_round(
      two["cpu_seconds_per_round"])
  assert 0 <= two["modelled_round"]["driver_share"] < 1
  # One call a round, run on the first worker: the second moves nothing.
  wire = two["wire_bytes_per_round"]
  assert wire["to_workers"][1] == wire["from_workers"][1] == 0
  assert wire["to_workers"][0] > 0 and wire["from_workers"][0] > 0


def test_workers_taking_their_calls_in_turn_train_as_at_once():
  flags = ["--algorithm=fedaws", "--num_classes=300", "--local_workers=2"]
  at_once, in_turn = benchmark(*flags), benchmark(*flags, "--one_call_at_a_time")
  assert in_turn["weights_sha1"] == at_once["weights_sha1"]
  assert in_turn["one_call_at_a_time"] and "one_call_at_a_time" not in at_once
  assert len(in_turn["cpu_seconds_per_round"]["workers"]) == 2
  assert at_once["warmup_rounds"] == 2  # By default, the most workers.


def test_warmup_rounds_train_as_the_timed_ones():
  """Two untimed rounds and one timed end where one untimed and two timed do."""
  flags = ["--algorithm=fedaws", "--num_classes=300", "--spreadout_search=approximate"]
  two_warm = benchmark(*flags, "--warmup_rounds=2")
  one_warm = benchmark(*flags, "--repeats=2")
  assert (two_warm["warmup_rounds"], one_warm["warmup_rounds"]) == (2, 1)
  assert two_warm["weights_sha1"] == one_warm["weights_sha1"]
  three_rounds = benchmark(*flags, "--warmup_rounds=3")
  assert three_rounds["weights_sha1"] != one_warm["weights_sha1"]


@pytest.mark.parametrize("flag, message", [
    ("--sittings=0", "--sittings must be >= 1"),
    ("--warmup_rounds=0", "--warmup_rounds must be >= 1")])
def test_no_sittings_or_warmup_is_refused_by_flag(flag, message):
  result = run_module("scripts.benchmark_round_cost", flag)
  assert result.returncode == 2
  assert message in result.stderr


def test_a_settled_round_returns_with_the_rows_it_moved_placed():
  """`next_round` settled returns once the spreadout index has placed the rows
  the round moved (placed in the background otherwise, beside the next calls)."""
  release = threading.Event()

  class HeldShard(class_neighbours.ListShard):
    held, placed = False, 0

    def place(self, *args):
      if self.held:
        release.wait(30)
      self.placed += 1
      return super().place(*args)

  table = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32)
  shard = HeldShard()
  index = class_neighbours.ApproximateNeighbours(table, 0, shards=[shard])
  index.nearest(None, table, np.zeros(0, np.int64), np.arange(3), 2)

  class Process:  # A round that moves two rows of the table.
    def next(self, state, data):
      del data
      index.moved(table, np.array([1, 4]))
      return types.SimpleNamespace(state=state + 1)

  shard.held, before = True, shard.placed
  assert round_cost_benchmark.next_round(Process(), 0, None, settled=False) == 1
  assert shard.placed == before  # Still held: placing beside what runs next.
  release.set()
  class_neighbours.settle_moves()
  assert shard.placed == before + 1
  release.clear()
  threading.Timer(0.2, release.set).start()
  assert round_cost_benchmark.next_round(Process(), 1, None, settled=True) == 2
  assert shard.placed == before + 2
