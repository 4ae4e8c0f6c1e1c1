r"""Exports a training run's checkpoint: query tower, item embeddings, top-k index.

  python -m scripts.export --run_dir=runs/central_small --export_dir=/tmp/export --k=10
  python -m scripts.export --run_dir=runs/shop --export_dir=runs/shop/export_ann \
      --index=approximate --index_recall=0.95
"""

import json
import os

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

from fed_retrieval import export
from fed_retrieval import index_flags
from fed_retrieval.models import dual_encoder
from fed_retrieval.training import run_directory
from fed_retrieval.training.centralized_loop import CHECKPOINT
from tasks.movielens import item_vocabulary

_RUN_DIR = flags.DEFINE_string("run_dir", None, "Output directory of a training run.")
_EXPORT_DIR = flags.DEFINE_string("export_dir", None, "Where to write the export.")
_K = flags.DEFINE_integer("k", 10, "Items the top-k index returns.")
flags.mark_flags_as_required(["run_dir", "export_dir"])


def main(argv) -> None:
  del argv
  run_config = run_directory.read_run_config(_RUN_DIR.value)
  checkpoint = os.path.join(_RUN_DIR.value, CHECKPOINT)
  if not os.path.isfile(checkpoint + ".index"):
    raise cli.UserError(f"--run_dir={_RUN_DIR.value}: no final checkpoint "
                        f"({CHECKPOINT}); has the run finished?")
  if not os.path.isfile(os.path.join(_RUN_DIR.value, item_vocabulary.FILE)):
    raise cli.UserError(
        f"--run_dir={_RUN_DIR.value}: no {item_vocabulary.FILE}; the run was trained "
        "before item ids were made dense (its rows are raw movie ids): retrain it "
        "into a new --output_dir, or use the export it wrote itself")
  config = dual_encoder.DualEncoderConfig.from_json(json.dumps(run_config["model"]))
  model = dual_encoder.build_dual_encoder(config)
  model.load_weights(checkpoint).expect_partial()
  print(export.export_model(model, config, item_vocabulary.load(_RUN_DIR.value),
                            _EXPORT_DIR.value, _K.value, index_flags.INDEX.value,
                            index_flags.INDEX_RECALL.value))


if __name__ == "__main__":
  cli.run(main, help_groups=[("Top-k index", None, (index_flags.INDEX,
                                                    index_flags.INDEX_RECALL))])
