"""Runs a command and prints the peak memory of its whole process tree.

  python tools/tree_peak.py .venv/bin/python -m scripts.train_federated ...
The command's output passes through; at its end one JSON line goes to stderr:
peak_rss_mb (the largest summed RSS of this tool, the command and every
descendant, the TFF worker included), the sum of their high-water marks,
the processes seen, the seconds it ran and its exit code, which the tool
exits with. For README memory figures of whole runs (the benchmarks measure
their own).
"""

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fed_retrieval.runtime import process_memory  # pylint: disable=wrong-import-position


def main(argv) -> int:
  if not argv:
    print("usage: python tools/tree_peak.py COMMAND [ARGS...]", file=sys.stderr)
    return 2
  start = time.perf_counter()
  with process_memory.ProcessTreePeak(interval_seconds=0.2,
                                     tree_interval_seconds=0.2) as peak:
    returncode = subprocess.call(argv)
  print(json.dumps({**peak.report(), "seconds": round(time.perf_counter() - start, 1),
                    "returncode": returncode}), file=sys.stderr)
  return returncode


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
