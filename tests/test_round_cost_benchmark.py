"""The round-cost benchmark script: figures present and consistent (no timing targets)."""

import json

import numpy as np
import pytest

from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.models import xc_encoder
from tests.script_runs import run_module


@pytest.mark.parametrize("algorithm,bag", [("fedss", "whole"), ("fedaws", "selected")])
def test_the_round_cost_script_reports_tree_memory_and_bytes(algorithm, bag):
  result = run_module(
      "scripts.benchmark_round_cost", f"--algorithm={algorithm}", f"--bag={bag}",
      "--num_classes=300", "--num_features=500", "--num_negatives=20",
      "--clients_per_round=4", "--classes_per_client=3", "--repeats=1")
  assert result.returncode == 0, result.stderr[-3000:]
  report = json.loads(result.stdout)
  assert report["memory"]["processes"] >= 2  # Python and the TFF worker.
  assert report["memory"]["peak_rss_mb"] > 0
  assert report["seconds_per_round_min"] > 0
  model = xc_encoder.XCEncoderConfig(500, 300, bag_dim=64, hidden_dims=(128,),
                                     embedding_dim=64)
  model_floats = sum(np.prod(s) for s in model.weight_shapes())
  assert report["model_bytes"] == 4 * (model_floats + 300 * 64)
  if bag == "whole":
    expected = fedss.bytes_per_client(model.weight_shapes(), 300, 64, FedSSConfig(
        num_negatives=20, positives_per_client=3))
    assert (report["bytes_down_per_client"], report["bytes_up_per_client"]) == expected
  else:  # The dense layers, 3 class rows and the bag rows of <= 100 points' features.
    dense = sum(np.prod(s) for s in model.weight_shapes()[1:])
    bag_rows = (report["bytes_down_per_client"] / 4 - dense - 3 * 64) / 64
    assert bag_rows == int(bag_rows) and 1 < bag_rows <= 501
  assert report["down_share_of_model"] == pytest.approx(
      report["bytes_down_per_client"] / report["model_bytes"], abs=1e-5)
