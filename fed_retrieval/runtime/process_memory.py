"""Peak memory of a whole process tree: this process and every descendant.

TFF runs its computations in a `worker_binary` child process, so the Python
process's own `ru_maxrss` misses most of a federated run's memory (a FedSS
round at 100k labels: 1.3 GB reported, 6.5 GB for the tree). `ProcessTreePeak`
samples the resident set of the tree from a background thread while its block
runs and reports the largest sum seen, and, as an upper bound that a short
spike between two samples cannot escape, the sum of each process's high-water
mark (VmHWM: the largest RSS the kernel saw it use, not necessarily at once).

Listing the tree reads every process's /proc entry, so the tree and its
high-water marks are read every `tree_interval_seconds` (and at the block's
ends), the known processes' RSS every `interval_seconds`: listing the tree 20
times a second took 0.66 CPU s of a 17.7 s round (4,000 clients,
`scripts.benchmark_round_cost`), which the benchmark counted as the
driver's; now 0.09-0.15 s. `sampler_cpu_seconds` says how much the sampling
took, for a benchmark to leave out of this process's CPU.
"""

import threading
import time
from typing import Dict, List, Optional

import psutil

MB = 1024 * 1024


def _tree(root: psutil.Process):
  try:
    return [root] + root.children(recursive=True)
  except psutil.Error:
    return [root]


def _high_water_mark_mb(process: psutil.Process) -> float:
  """VmHWM of a live process in MB (0 once it has gone)."""
  try:
    with open(f"/proc/{process.pid}/status") as f:
      for line in f:
        if line.startswith("VmHWM:"):
          return int(line.split()[1]) / 1024
  except OSError:
    pass
  return 0.0


class ProcessTreePeak:
  """A context manager that records the tree's peak RSS while its block runs.

    with ProcessTreePeak() as peak:
      run_rounds()
    peak.report()  # {"peak_rss_mb": ..., ...}
  """

  def __init__(self, interval_seconds: float = 0.05, pid: Optional[int] = None,
               tree_interval_seconds: float = 1.0):
    self._interval, self._tree_interval = interval_seconds, tree_interval_seconds
    self._root = psutil.Process(pid)
    self._processes: List[psutil.Process] = []
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
    self._peak_bytes = 0
    self._high_water_marks: Dict[int, float] = {}
    self._final_cpu = 0.0  # The sampling thread's CPU seconds, once it ends.

  def _list_tree(self) -> None:
    """The tree's processes read anew, and their high-water marks."""
    self._processes = _tree(self._root)
    for process in self._processes:
      self._high_water_marks[process.pid] = max(
          self._high_water_marks.get(process.pid, 0.0), _high_water_mark_mb(process))

  def _sample(self) -> None:
    total = 0
    for process in self._processes:
      try:
        total += process.memory_info().rss
      except psutil.Error:
        continue  # Exited since the tree was listed.
    self._peak_bytes = max(self._peak_bytes, total)

  def _sample_until_stopped(self) -> None:
    listed = time.monotonic()
    while not self._stop.wait(self._interval):
      if time.monotonic() - listed >= self._tree_interval:
        self._list_tree()
        listed = time.monotonic()
      self._sample()
    self._final_cpu = time.thread_time()

  def sampler_cpu_seconds(self) -> float:
    """CPU seconds the sampling thread has taken so far (0 before it runs)."""
    if not self._thread.is_alive():
      return self._final_cpu
    try:
      return time.clock_gettime(time.pthread_getcpuclockid(self._thread.ident))
    except OSError:  # It ended since.
      return self._final_cpu

  def __enter__(self) -> "ProcessTreePeak":
    self._list_tree()
    self._sample()
    self._thread.start()
    return self

  def __exit__(self, *exc_info) -> None:
    self._stop.set()
    self._thread.join()
    self._sample()
    self._list_tree()  # After the last sample: a live process's mark >= its RSS.

  @property
  def peak_rss_mb(self) -> float:
    return self._peak_bytes / MB

  def report(self) -> Dict[str, float]:
    """The peak of the summed RSS, the sum of high-water marks and how many
    processes the tree held."""
    return {"peak_rss_mb": round(self.peak_rss_mb, 1),
            "peak_rss_mb_sum_of_high_water_marks":
                round(sum(self._high_water_marks.values()), 1),
            "processes": len(self._high_water_marks)}
