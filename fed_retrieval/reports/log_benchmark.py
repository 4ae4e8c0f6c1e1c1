"""Seconds and peak memory of reading an interaction log, and of turning it
into a task's examples and splits.

`write_log` writes a synthetic log of `rows` events as a shop would export
it (text user and item ids, Unix times, a rating), in blocks so that writing
it does not need it in memory; `measure` times `interaction_log` reading it,
then the MovieLens family building its task from it, each with the peak
resident memory of the process.
"""

import os
import time
from typing import Any, Dict

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from fed_retrieval.runtime import process_memory
from tasks.movielens import interaction_log
from tasks.movielens import movielens_task

BLOCK = 1_000_000
COLUMNS = interaction_log.LogColumns(user="user", item="item", time="time",
                                     rating="rating")


def write_log(path: str, rows: int, users: int, items: int, seed: int = 0) -> None:
  """A CSV log of `rows` events: users 'u_<hex>' with ~rows/users events each,
  items 'sku-<n>' Zipf-popular, increasing times, ratings 1-5."""
  rng = np.random.default_rng(seed)
  with pa_csv.CSVWriter(path, pa.schema([("user", pa.string()), ("item", pa.string()),
                                         ("time", pa.int64()), ("rating", pa.int8())])
                        ) as writer:
    for start in range(0, rows, BLOCK):
      size = min(BLOCK, rows - start)
      user = rng.integers(0, users, size)
      item = np.minimum(rng.zipf(1.3, size), items) - 1
      writer.write_batch(pa.record_batch([
          pa.array(np.char.add("u_", np.char.mod("%x", user))),
          pa.array(np.char.add("sku-", item.astype(str))),
          pa.array(1_500_000_000 + start + np.arange(size)),
          pa.array(rng.integers(1, 6, size).astype(np.int8))],
          names=["user", "item", "time", "rating"]))


def measure(path: str) -> Dict[str, Any]:
  """Seconds and peak RSS (MB) of reading the log, then of building its task."""
  report: Dict[str, Any] = {"log_mb": os.path.getsize(path) / 2 ** 20}
  with process_memory.ProcessTreePeak() as peak:
    start = time.perf_counter()
    events, items = interaction_log.read_interactions(path, COLUMNS)
    report["read_seconds"] = time.perf_counter() - start
  report.update(rows=len(events), users=int(events["user_id"].max()) + 1,
                items=items.num_items, read_peak_rss_mb=peak.report()["peak_rss_mb"])
  del events, items
  with process_memory.ProcessTreePeak() as peak:
    start = time.perf_counter()
    task = movielens_task.build_task(movielens_task.TaskConfig(
        interactions_path=path, log_columns=COLUMNS))
    report["task_seconds"] = time.perf_counter() - start
  report.update(examples=len(task.federated_train) + len(task.federated_val) +
                len(task.federated_test), task_peak_rss_mb=peak.report()["peak_rss_mb"])
  return report
