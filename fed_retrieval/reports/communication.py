"""Communication accounting in reports: bytes per client per round, and a plot
of quality against them (every algorithm: FedAvg, FedSGD, FedAwS, FedSS)."""

from typing import Any, Callable, Dict, Sequence

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top

Row = Dict[str, Any]


def megabytes(value) -> str:
  """'5.187' (MB) for a byte count; '' where a row has none (centralized, references)."""
  return "" if value in (None, "") else f"{value / 1e6:.3f}"


def plot_quality_vs_bytes(rows: Sequence[Row], label: Callable[[Row], str],
                          metric: str, path: str) -> None:
  """Each row's test `metric` against the megabytes a client moves per round
  (down + up), on a log axis: the cost-quality trade-off of each algorithm."""
  figure, axes = plt.subplots(figsize=(7, 5))
  for row in rows:
    total = (row["bytes_down_per_client"] + row["bytes_up_per_client"]) / 1e6
    axes.scatter(total, 100 * row[metric], s=30)
    axes.annotate(label(row), (total, 100 * row[metric]), fontsize=7,
                  xytext=(4, 2), textcoords="offset points")
  axes.set_xscale("log")
  axes.set_xlabel("MB per client per round (download + upload)")
  axes.set_ylabel(f"test {metric} (%)")
  axes.set_title("Quality against communication")
  axes.grid(alpha=0.3, which="both")
  figure.tight_layout()
  figure.savefig(path, dpi=120)
  plt.close(figure)
