"""The nearest classes behind FedAwS's spreadout: the exact search, the inverted
file kept across rounds, and the spreadout step on either."""

import time

import faiss
import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.algorithms import class_neighbours
from fed_retrieval.algorithms import fedaws
from losses import class_spreadout
from tests.spreadout_reference import clustered_table


def test_exact_search_is_the_spreadouts_own():
  table = np.random.default_rng(0).standard_normal((300, 8)).astype(np.float32)
  ids = np.array([0, 5, 299, 17], np.int32)
  np.testing.assert_array_equal(
      class_neighbours.exact_nearest(table, ids, 10),
      class_spreadout.nearest_classes(tf.constant(table), tf.constant(ids), 10).numpy())


@pytest.mark.parametrize("reranked_at_once", [class_neighbours.RERANK_QUERIES, 4])
def test_scanning_every_list_is_exact(monkeypatch, reranked_at_once):
  """Also with the candidates re-ranked a few queries at a time."""
  monkeypatch.setattr(class_neighbours, "RERANK_QUERIES", reranked_at_once)
  table = clustered_table(200, 8, 5, 0.5, seed=1)  # 28 lists, nprobe 32: all.
  index = class_neighbours.ApproximateNeighbours(table, seed=0)
  assert index.nprobe == index.nlist == 28
  ids = np.arange(0, 200, 7, dtype=np.int32)
  np.testing.assert_array_equal(index.nearest(None, table, ids, ids, 10),
                                class_neighbours.exact_nearest(table, ids, 10))


def test_neighbours_closer_than_float16_can_tell_come_in_the_exact_order():
  """The float16 scan's candidates are re-ranked in float32: six rows whose
  cosines to the query are within 1e-5 of each other (float16 tells 5e-4
  apart near 1) come in the exact search's order."""
  rng = np.random.default_rng(5)
  table = rng.standard_normal((200, 8)).astype(np.float32)
  direction = table[0] / np.linalg.norm(table[0])
  noise = rng.standard_normal((6, 8)).astype(np.float32)
  table[[190, 50, 120, 7, 33, 160]] = direction + 1e-3 * (
      noise - np.outer(noise @ direction, direction))
  index = class_neighbours.ApproximateNeighbours(table, seed=0)  # Every list scanned.
  ids = np.array([0], np.int32)
  found = index.nearest(None, table, ids[:0], ids, 6)
  np.testing.assert_array_equal(found, class_neighbours.exact_nearest(table, ids, 6))


def test_rows_moved_round_by_round_search_as_an_index_built_anew():
  """The index after rounds of moved rows finds what one built from the final
  table finds (a resumed run rebuilds it)."""
  rng = np.random.default_rng(2)
  table = clustered_table(20_000, 16, 100, 0.3, seed=2)
  kept = class_neighbours.ApproximateNeighbours(table, seed=0)
  before = None
  for _ in range(3):
    changed = rng.choice(len(table), 500, replace=False).astype(np.int32)
    after = table.copy()
    after[changed] += rng.standard_normal((500, 16)).astype(np.float32)
    found = kept.nearest(before, after, changed, changed[:50], 10)  # None: built.
    before = table = after
  anew = class_neighbours.ApproximateNeighbours(table, seed=0)
  queries = np.arange(0, 20_000, 97, dtype=np.int32)
  np.testing.assert_array_equal(kept.nearest(table, table, queries[:0], queries, 10),
                                anew.nearest(None, table, queries[:0], queries, 10))
  assert found.shape == (50, 10)


def test_rows_given_as_moved_are_placed_without_reading_the_table():
  """Told a round's moved rows, the index places those and does not read
  them from the table: handed the table of before, it finds (for classes
  that did not move) what the index that read the new table finds."""
  rng = np.random.default_rng(3)
  table = clustered_table(5_000, 16, 50, 0.3, seed=3)
  ids = np.sort(rng.choice(len(table), 400, replace=False))
  after = table.copy()
  after[ids] = clustered_table(400, 16, 50, 0.3, seed=4)
  read, given = (class_neighbours.ApproximateNeighbours(table, seed=0) for _ in range(2))
  queries = np.setdiff1d(np.arange(0, 5_000, 13), ids).astype(np.int32)
  for index in read, given:
    index.nearest(None, table, queries[:0], queries[:1], 10)  # Builds the lists.
  read.moved(after, ids)
  given.moved(table, ids, after[ids])
  found = given.nearest(table, table, queries[:0], queries, 10)
  np.testing.assert_array_equal(
      found, read.nearest(after, after, queries[:0], queries, 10))
  assert not np.array_equal(found, class_neighbours.ApproximateNeighbours(
      table, seed=0).nearest(None, table, queries[:0], queries, 10))


def test_rows_near_a_tie_between_two_centroids_take_the_same_lists_on_shards():
  """6,000 rows moved to the sums of two centroids (their lists decided by
  the last bits of faiss's float sums), one list scanned a query: three
  shards find the one index's neighbours for each (with the rows split as
  ids mod 3 instead, each shard scoring its own, 602 of the queries
  differed), and each row is held by one shard."""
  rng = np.random.default_rng(6)
  table = rng.standard_normal((20_000, 64)).astype(np.float32)
  one, three = (class_neighbours.ApproximateNeighbours(table, seed=0, nprobe=1, shards=[
      class_neighbours.ListShard() for _ in range(count)]) for count in (1, 3))
  nlist = one.nlist
  pairs = rng.choice(nlist * nlist, 20_000, replace=False)
  first, second = pairs // nlist, pairs % nlist
  distinct = first < second  # Each a sum of two centroids, no two alike.
  changed = np.sort(rng.choice(len(table), 6_000, replace=False)).astype(np.int32)
  after = table.copy()
  after[changed] = (one.centroids[first[distinct][:6_000]] +
                    one.centroids[second[distinct][:6_000]])
  for index in (one, three):
    index.nearest(None, table, changed[:0], changed[:1], 5)  # Places every row.
  np.testing.assert_array_equal(three.nearest(table, after, changed, changed, 5),
                                one.nearest(table, after, changed, changed, 5))
  held = [s._index.ntotal for s in three._shards]  # pylint: disable=protected-access
  assert sum(held) == len(table)


class _FailingMoves(class_neighbours.ListShard):
  """A shard whose moves fail after the first placing (a lost remote shard)."""

  def place(self, generation, dropped, ids, rows):
    if self._index.ntotal:
      raise RuntimeError("the shard is gone")
    return super().place(generation, dropped, ids, rows)


def test_moves_placed_in_the_background_fail_at_the_next_search():
  table = clustered_table(2_000, 8, 20, 0.3, seed=4)
  index = class_neighbours.ApproximateNeighbours(table, seed=0, shards=[_FailingMoves()])
  queries = np.arange(10, dtype=np.int32)
  index.nearest(None, table, queries[:0], queries, 5)
  index.moved(table, queries)  # Returns at once: the rows are placed by a thread.
  with pytest.raises(RuntimeError, match="the shard is gone"):
    index.nearest(table, table, queries[:0], queries, 5)


class _SlowMoves(class_neighbours.ListShard):
  """A shard that takes a while to place moved rows, and says when it has."""

  def __init__(self):
    super().__init__()
    self.placed = []

  def place(self, generation, dropped, ids, rows):
    time.sleep(0.3)
    self.placed.append(ids.copy())
    return super().place(generation, dropped, ids, rows)


def test_settling_the_moves_waits_until_every_index_placed_its_rows():
  table = clustered_table(2_000, 8, 20, 0.3, seed=4)
  shards = [_SlowMoves(), _SlowMoves()]
  indexes = [class_neighbours.ApproximateNeighbours(table, seed=0, shards=[s]) for s in shards]
  queries = np.arange(10, dtype=np.int32)
  for index, shard in zip(indexes, shards):
    index.nearest(None, table, queries[:0], queries, 5)  # Places every row.
    shard.placed.clear()
  for index in indexes:
    index.moved(table, queries)  # Returns at once: the rows are placed by a thread.
  assert shards[0].placed == shards[1].placed == []
  class_neighbours.settle_moves()
  for shard in shards:
    np.testing.assert_array_equal(np.concatenate(shard.placed), queries)


@pytest.mark.parametrize("spread,least_recall", [(0.3, 0.95), (1.0, 0.83)])
def test_a_query_scans_a_small_share_of_the_table_at_a_stated_recall(spread, least_recall):
  """40,000 clustered rows: 400 lists, 32 scanned; the distances computed per
  query stay near 32/400 of the table, and recall@10 against the exact
  search is high on tight clusters and lower on loose ones."""
  table = clustered_table(40_000, 32, 400, spread, seed=3)
  index = class_neighbours.ApproximateNeighbours(table, seed=0)
  ids = np.arange(0, 40_000, 200, dtype=np.int32)
  index.nearest(None, table, ids[:0], ids[:1], 10)  # Builds the lists.
  faiss.cvar.indexIVF_stats.reset()
  found = index.nearest(table, table, ids[:0], ids, 10)
  scanned = faiss.cvar.indexIVF_stats.ndis / len(ids)
  assert (index.nlist, index.nprobe) == (400, 32)
  assert scanned < 0.15 * len(table)
  recall = class_neighbours.recall_against_exact(
      found, class_neighbours.exact_nearest(table, ids, 10))
  assert least_recall <= recall <= 1.0


def test_the_approximate_spreadout_step_equals_the_exact_when_every_list_is_scanned():
  """Three rounds of FedAwS's step on a 200-row table (every list scanned):
  the approximate search's steps equal the exact one's."""
  rng = np.random.default_rng(4)
  table = rng.standard_normal((200, 8)).astype(np.float32)
  exact = fedaws.spreadout_step(fedaws.FedAwSConfig(spreadout_search="exact"), table, 0)
  approximate = fedaws.spreadout_step(
      fedaws.FedAwSConfig(spreadout_search="approximate"), table, 0)
  ours = theirs = table
  for _ in range(3):
    updated = np.sort(rng.choice(200, 20, replace=False)).astype(np.int32)
    moved = rng.standard_normal((20, 8)).astype(np.float32)
    ours_in, theirs_in = ours.copy(), theirs.copy()
    ours_in[updated] += moved
    theirs_in[updated] += moved
    ours = approximate(ours, ours_in, updated)
    theirs = exact(theirs, theirs_in, updated)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
  assert not np.allclose(ours, table)


@pytest.mark.parametrize("num_queries,shards,ranges", [
    (3, 3, [(0, 3)]), (10, 3, [(0, 4), (4, 10)]), (8, 3, [(0, 4), (4, 8)]),
    (11, 3, [(0, 4), (4, 11)]),
    (40, 3, [(0, 16), (16, 28), (28, 40)]), (0, 2, [(0, 0)])])
def test_assignment_ranges_start_at_blocks_and_keep_a_short_tail(num_queries, shards,
                                                                 ranges):
  assert class_neighbours.assignment_ranges(num_queries, shards, 4) == ranges


def test_queries_assigned_in_ranges_score_the_centroids_as_all_at_once():
  """faiss's centroid scores of each range, bit for bit those of one search of
  all the queries (misaligned ranges change some in their last bits)."""
  rng = np.random.default_rng(5)
  centroids, queries = (
      (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)
      for rows in (rng.standard_normal((700, 64)), rng.standard_normal((10_000, 64))))
  flat = faiss.IndexFlatIP(64)
  flat.add(centroids)
  scores, lists = flat.search(queries, 16)
  ranges = class_neighbours.assignment_ranges(
      len(queries), 3, faiss.cvar.distance_compute_blas_query_bs)
  assert len(ranges) == 2  # 4,096 and the rest.
  parts = [flat.search(queries[start:end], 16) for start, end in ranges]
  np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), scores)
  np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), lists)


def test_an_unknown_search_is_refused_by_name():
  with pytest.raises(ValueError, match="--spreadout_search must be one of"):
    fedaws.FedAwSConfig(spreadout_search="fast")
