r"""Top-k recommendations for a history of items, from an exported model.

  python -m scripts.recommend --model_dir=runs/central_small/export \
      --history=12,7,31 [--items_path=ml-1m/movies.dat] [--k=10]
  python -m scripts.recommend --model_dir=runs/shop/export --history=sku-1,sku-7 \
      --items_path=items.csv --item_id_column=sku --item_name_column=name
--history lists the data's own item ids in the order seen (most recent last),
and the recommendations are named by the same ids (and display names with
--items_path); items in the history are not recommended again unless
--include_history.
"""

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

import numpy as np

from fed_retrieval import export
from fed_retrieval import index_flags
from tasks.movielens import item_flags

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "An export directory.")
_HISTORY = flags.DEFINE_list("history", None, "Item ids seen, most recent last.")
_K = flags.DEFINE_integer("k", 10, "Number of recommendations.")
_INCLUDE_HISTORY = flags.DEFINE_bool("include_history", False,
                                     "Also recommend items already seen.")
flags.mark_flags_as_required(["model_dir", "history"])


def recommend(exported: export.RetrievalExport, history, k: int,
              include_history: bool = False, index: str = "auto"):
  """[(item id, score)] best first for a history of the data's item ids (most
  recent last), from the export's top-k index (`index`: auto, brute_force or
  approximate)."""
  rows = exported.items.rows(history, what="--history: item id")
  num_items = exported.items.num_items
  if not 1 <= k <= num_items:
    raise ValueError(f"--k={k} must lie in [1, {num_items}] (the model's items)")
  length = exported.config.max_context_length
  recent_first = list(reversed(rows))[:length]
  context = np.zeros([1, length], np.int32)
  context[0, :len(recent_first)] = recent_first
  excluded = set() if include_history else set(rows)
  scores, found = exported.top_k(context, min(k + len(excluded), num_items), index)
  kept = [(row, score) for row, score in zip(found[0], scores[0])
          if row > 0 and row not in excluded][:k]
  top = np.array([row for row, _ in kept], np.int64)
  return [(item.item(), float(score))
          for item, (_, score) in zip(exported.items.ids_of_rows(top), kept)]


def main(argv) -> None:
  del argv
  exported = export.load_export(_MODEL_DIR.value)
  history = exported.items.parse(_HISTORY.value, "--history").tolist()
  names = item_flags.item_names_from_flags()
  recommendations = recommend(exported, history, _K.value, _INCLUDE_HISTORY.value,
                              index_flags.INDEX.value)
  width = max([6] + [len(str(i)) for i in history + [i for i, _ in recommendations]])
  if names:  # Echo the history, so a typo in an id shows as the wrong item.
    print("history (most recent last):")
    for item in history:
      print(f"     {item!s:>{width}}  {names.get(item, '(not in --items_path)')}")
    print(f"top {_K.value}:")
  for rank, (item, score) in enumerate(recommendations, start=1):
    print(f"{rank:3d}. {item!s:>{width}}  {score:+.4f}  {names.get(item, '')}".rstrip())


if __name__ == "__main__":
  cli.run(main, help_groups=[("Item names", None, (
      item_flags.ITEMS_PATH, item_flags.ITEM_ID_COLUMN, item_flags.ITEM_NAME_COLUMN)),
      index_flags.HELP_GROUP])
