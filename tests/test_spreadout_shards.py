"""FedAwS's approximate spreadout index kept on shards in other processes: the
wire that carries arrays, the neighbours (the one index's), a shard that
stops answering, and a run that uses shards, loses one and resumes."""

import json
import os
import signal
import socket
import struct
import threading
import time

import numpy as np
import portpicker
import pytest

from fed_retrieval.algorithms import class_neighbours
from fed_retrieval.runtime import array_service
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.runtime import wire_bytes
from tests.script_runs import run_module
from tests.server_runs import check_a_lost_server_resumes
from tests.server_runs import check_a_silent_server_is_one_line
from tests.spreadout_reference import clustered_table


class _Arithmetic:
  def add(self, a, b):
    return (a + b,)

  def shapes(self, *arrays):
    return tuple(np.asarray(a.shape, np.int64) for a in arrays)


@pytest.fixture(scope="module")
def served():
  """An `_Arithmetic` served by a thread of this process: its address."""
  port, ready = portpicker.pick_unused_port(), threading.Event()
  threading.Thread(target=array_service.serve, daemon=True, args=(
      port, _Arithmetic(), ("add", "shapes"), ready.set)).start()
  assert ready.wait(10)
  return f"localhost:{port}"


def test_arrays_of_every_number_type_and_shape_go_and_come_back(served):
  remote = array_service.RemoteObject(served, "test service", "test")
  big = np.random.default_rng(0).standard_normal(3_000_000).astype(np.float32)  # > a chunk.
  (total,) = remote.call("add", big, np.float32(1.5))
  np.testing.assert_array_equal(total, big + 1.5)
  arrays = [np.int64(7), np.zeros((0, 3), np.float16), np.ones((2, 3, 4), bool),
            np.arange(6, dtype=np.uint8).reshape(2, 3)]
  shapes = remote.call("shapes", *arrays)
  assert [s.tolist() for s in shapes] == [[], [0, 3], [2, 3, 4], [2, 3]]
  (same,) = remote.call("add", arrays[3], np.uint8(0))
  assert same.dtype == np.uint8 and same.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_a_calls_bytes_are_counted_as_its_servers_each_way(served):
  """Each message: a 4-byte length, a JSON header of under 100 bytes here, then
  the arrays' bytes."""
  remote = array_service.RemoteObject(served, "test service", "test")
  rows, scale = np.ones((1000, 3), np.float32), np.float32(2.0)
  before = wire_bytes.totals()
  remote.call("add", rows, scale)
  sent, received = wire_bytes.between(before, wire_bytes.totals(), served)
  assert rows.nbytes + 4 + 4 < sent < rows.nbytes + 4 + 4 + 100
  assert rows.nbytes + 4 < received < rows.nbytes + 4 + 100


def test_an_unserved_method_is_an_error_naming_it_and_the_connection_lives_on(served):
  remote = array_service.RemoteObject(served, "test service", "test")
  with pytest.raises(RuntimeError, match=f"the test service at {served}: ValueError: no "
                     r"method '__init__' \(served: add, shapes\)"):
    remote.call("__init__")
  assert remote.call("add", np.int64(2), np.int64(3))[0] == 5


def test_text_is_refused_as_data_and_the_caller_told():
  port, ready = portpicker.pick_unused_port(), threading.Event()
  threading.Thread(target=array_service.serve, daemon=True, args=(
      port, _Arithmetic(), ("add",), ready.set)).start()
  assert ready.wait(10)
  remote = array_service.RemoteObject(f"localhost:{port}", "test service", "test")
  with pytest.raises(array_service.ServiceLost, match=f"at localhost:{port} stopped"):
    remote.call("add", np.array(["os.system"]), np.array(["x"]))


def test_shards_in_other_processes_find_the_one_indexs_neighbours_round_by_round():
  """13,000 queries a round, faiss's three blocks of them (4,096, 4,096 and
  the rest; each shard finds one block's lists), or 300 (one shard does)."""
  rng = np.random.default_rng(3)
  table = clustered_table(30_000, 16, 150, 0.3, seed=3)
  here = class_neighbours.ApproximateNeighbours(table, seed=0)
  with array_service.LocalServers("scripts.spreadout_shard", 3,
                                  tff_runtime.prepare_child) as servers:
    shards = [class_neighbours.RemoteShard(a) for a in servers.addresses]
    spread = class_neighbours.ApproximateNeighbours(table, seed=0, shards=shards)
    before = None
    # The first round places every row; the others move some.
    for queried in (13_000, 300, 13_000):
      changed = rng.choice(len(table), 13_000, replace=False).astype(np.int32)
      after = table.copy()
      after[changed] += rng.standard_normal((13_000, 16)).astype(np.float32)
      queries = changed[:queried]
      np.testing.assert_array_equal(spread.nearest(before, after, changed, queries, 10),
                                    here.nearest(before, after, changed, queries, 10))
      before = table = after


def test_a_shard_another_index_configured_since_refuses_the_first():
  shard = class_neighbours.ListShard()
  centroids = np.eye(4, dtype=np.float32)
  (first,) = shard.configure(centroids, np.int64(2))
  shard.reset(first, np.arange(4), centroids)
  (second,) = shard.configure(centroids, np.int64(2))
  with pytest.raises(RuntimeError, match="another index configured this shard since"):
    shard.assign(first, centroids)
  shard.reset(second, np.arange(4), centroids)
  scores, ids, _ = shard.search(second, centroids, np.int64(1),
                                *shard.assign(second, centroids))
  assert ids.ravel().tolist() == [0, 1, 2, 3] and np.allclose(scores, 1)


def test_a_shard_normalizes_the_rows_it_is_given():
  """The driver sends the table's rows as they are; the shard's lists hold
  them as unit rows (inner products of unit queries are cosines), and it
  scores its best by their cosines too."""
  shard = class_neighbours.ListShard()
  (generation,) = shard.configure(np.eye(4, dtype=np.float32), np.int64(4))
  shard.reset(generation, np.arange(4), np.diag([5.0, 3.0, 0.5, 7.0]).astype(np.float32))
  moved = np.array([1])
  shard.place(generation, moved, moved, np.array([[0.0, 9.0, 0.0, 0.0]], np.float32))
  queries = np.eye(4, dtype=np.float32)
  scores, ids, cosines = shard.search(generation, queries, np.int64(1),
                                      *shard.assign(generation, queries))
  assert ids.ravel().tolist() == [0, 1, 2, 3]
  np.testing.assert_array_equal(scores.ravel(), [1, 1, 1, 1])
  np.testing.assert_array_equal(cosines.ravel(), [1, 1, 1, 1])


def test_a_shard_scores_rows_placed_after_its_reset_by_their_latest_values():
  """Rows placed later (new ids beyond the first, and moved ones) are scored
  by the values last given, as the float32 cosines of those rows."""
  shard = class_neighbours.ListShard()
  (generation,) = shard.configure(np.eye(4, dtype=np.float32), np.int64(4))
  shard.reset(generation, np.arange(2), np.eye(4, dtype=np.float32)[:2])
  placed = {1: [0.0, 2.0, 2.0, 0.0], 7: [0.0, 0.0, 3.0, 4.0], 12: [5.0, 0.0, 0.0, 0.0]}
  for ids in ([7], [1, 12]):  # New ids grow the shard's rows; 1 moves.
    shard.place(generation, np.array(ids), np.array(ids),
                np.array([placed[i] for i in ids], np.float32))
  queries = np.array([[0.0, 0.0, 1.0, 0.0]], np.float32)
  _, ids, cosines = shard.search(generation, queries, np.int64(4),
                                 *shard.assign(generation, queries))
  expected = {0: 0.0, 1: 2 / np.sqrt(8), 7: 0.6, 12: 0.0}
  assert sorted(ids[0].tolist()) == [0, 1, 7, 12]
  np.testing.assert_allclose(cosines[0], [expected[i] for i in ids[0]], atol=1e-6)


def test_a_shard_drops_the_moved_rows_it_held_and_reuses_their_slots():
  """Rows 1 and 2 moved to another shard leave this one; row 5, placed
  here after, takes a freed slot and is scored by its own value."""
  shard = class_neighbours.ListShard()
  (generation,) = shard.configure(np.eye(4, dtype=np.float32), np.int64(4))
  shard.reset(generation, np.arange(4), np.eye(4, dtype=np.float32))
  shard.place(generation, np.array([1, 2]), np.zeros(0, np.int64),
              np.zeros((0, 4), np.float32))
  queries = np.eye(4, dtype=np.float32)
  _, ids, _ = shard.search(generation, queries, np.int64(4),
                           *shard.assign(generation, queries))
  assert sorted(set(ids.ravel().tolist()) - {-1}) == [0, 3]
  shard.place(generation, np.array([5]), np.array([5]),
              np.array([[0.0, 3.0, 4.0, 0.0]], np.float32))
  _, ids, cosines = shard.search(generation, queries, np.int64(4),
                                 *shard.assign(generation, queries))
  assert sorted(set(ids.ravel().tolist()) - {-1}) == [0, 3, 5]
  np.testing.assert_allclose(cosines[ids == 5], [0.0, 0.6, 0.8, 0.0], atol=1e-6)
  assert len(shard._rows) == 4  # pylint: disable=protected-access


def test_a_shard_searching_the_lists_it_is_given_finds_what_its_own_search_does():
  """`assign` then `search` (the lists found once for every shard) against
  faiss's search of the same index, which finds the lists itself: the same
  rows and scores, with 8 of 64 lists scanned; the rows' cosines are the
  float32 table's."""
  table = clustered_table(5_000, 16, 40, 0.3, seed=1)
  shard = class_neighbours.ListShard()
  centroids = table[::78][:64] / np.linalg.norm(table[::78][:64], axis=1, keepdims=True)
  (generation,) = shard.configure(centroids.astype(np.float32), np.int64(8))
  shard.reset(generation, np.arange(len(table)), table)
  queries = (table[:500] / np.linalg.norm(table[:500], axis=1, keepdims=True)).astype(
      np.float32)
  given = shard.search(generation, queries, np.int64(12), *shard.assign(generation, queries))
  own = shard._index.search(queries, 12)  # pylint: disable=protected-access
  np.testing.assert_array_equal(given[1], own[1])
  np.testing.assert_array_equal(given[0], own[0])
  assert np.mean(given[1] >= 0) > 0.99  # Lists of rows, not empty slots.
  rows = table[np.maximum(given[1], 0)]
  expected = np.einsum("nd,nmd->nm", queries, rows) / np.linalg.norm(rows, axis=2)
  filled = given[1] >= 0
  np.testing.assert_allclose(given[2][filled], expected[filled], rtol=1e-5)
  assert np.abs(given[2] - given[0])[filled].max() > 1e-5  # Not the float16 scores.


def test_a_shard_whose_process_stops_or_dies_is_named_within_two_heartbeats():
  queries = np.eye(4, dtype=np.float32)
  with array_service.LocalServers("scripts.spreadout_shard", 1,
                                  tff_runtime.prepare_child) as servers:
    (address,), (process,) = servers.addresses, servers.processes
    shard = class_neighbours.RemoteShard(address, heartbeat_seconds=1.0)
    (generation,) = shard.configure(queries, np.int64(1))
    os.kill(process.pid, signal.SIGSTOP)  # Its port stays open: the kernel accepts.
    stopped_at = time.monotonic()
    try:
      with pytest.raises(array_service.ServiceLost) as lost:
        shard.assign(generation, queries)
      assert time.monotonic() - stopped_at < 2 * 1.0 + 1
    finally:
      os.kill(process.pid, signal.SIGCONT)
    assert str(lost.value) == (
        f"the spreadout index shard at {address} stopped answering (no answer within "
        "1 s: its process stopped, or its host is down or unreachable)")
    process.kill()
    process.wait()
    with pytest.raises(array_service.ServiceLost, match=f"shard at {address} stopped"):
      shard.assign(generation, queries)


QUICK_FEDAWS = ["--task=xc", "--synthetic_xc=xc_tiny", "--algorithm=fedaws",
                "--spreadout_search=approximate", "--spreadout_k=3", "--rounds=8",
                "--clients_per_round=20", "--eval_every=2", "--checkpoint_every=1",
                "--patience=0"]


@pytest.mark.runs_long
def test_a_run_on_shards_is_the_run_here_and_a_lost_shard_resumes_identically(tmp_path):
  check_a_lost_server_resumes(tmp_path, QUICK_FEDAWS, "scripts.spreadout_shard",
                              "spreadout_shards", "spreadout index shard")


def test_a_shard_that_does_not_answer_is_one_line_and_exit_2(tmp_path):
  check_a_silent_server_is_one_line(tmp_path, QUICK_FEDAWS, "spreadout_shards",
                                    "spreadout index shard")


@pytest.mark.parametrize("flags,message", [
    (["--spreadout_search=exact", "--spreadout_shards=localhost:8100"],
     "--spreadout_shards hold the approximate index: give --spreadout_search=approximate "
     "too"),
    (["--spreadout_shards=localhost:8100,localhost:8100"],
     "--spreadout_shards: an address is given twice (localhost:8100,localhost:8100)"),
    (["--spreadout_shards=10.1.2.3:8100"],
     "--spreadout_shards: 10.1.2.3:8100 is not on this machine, and its port is neither "
     "encrypted nor authenticated; run it on a private network and say so with "
     "--trusted_network, or reach it through an SSH tunnel (ssh -N -L PORT:localhost:PORT "
     "host, then --spreadout_shards=localhost:PORT)"),
])
def test_shards_refused_by_flag_in_one_line_writing_nothing(tmp_path, flags, message):
  result = run_module("scripts.train_federated", *QUICK_FEDAWS, *flags,
                      f"--output_dir={tmp_path}/run")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines() == [f"error: {message}"]
  assert not os.path.exists(tmp_path / "run")


def test_a_malformed_message_ends_its_connection_and_the_server_serves_on(served):
  host, port = array_service.parse_address(served, "test")
  with socket.create_connection((host, port), timeout=10) as sock:
    text = json.dumps({"method": "add", "arrays": [["<f4"]]}).encode()  # No shape.
    sock.sendall(struct.pack("!I", len(text)) + text)
    assert sock.recv(1) == b""  # Closed, no answer.
  remote = array_service.RemoteObject(served, "test service", "test")
  assert remote.call("add", np.int64(2), np.int64(3))[0] == 5
