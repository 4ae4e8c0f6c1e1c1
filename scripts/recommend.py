r"""Top-k recommendations for a viewing history, from an exported model.

  python -m scripts.recommend --model_dir=runs/central_small/export \
      --history=12,7,31 [--movies_path=ml-1m/movies.dat] [--k=10]
--history lists the ratings file's movie ids in the order watched (most recent
last), and the recommendations are named by the same ids (and titles with
--movies_path); movies in the history are not recommended again unless
--include_history.
"""

from scripts import cli  # First: isolates the network, quiets TF.
from absl import flags

import numpy as np
import tensorflow as tf

from fed_retrieval import export
from tasks.movielens import movies_io

_MODEL_DIR = flags.DEFINE_string("model_dir", None, "An export directory.")
_HISTORY = flags.DEFINE_list("history", None, "Movie ids watched, most recent last.")
_MOVIES_PATH = flags.DEFINE_string("movies_path", None,
                                   "movies.dat or movies.csv, for titles.")
_K = flags.DEFINE_integer("k", 10, "Number of recommendations.")
_INCLUDE_HISTORY = flags.DEFINE_bool("include_history", False,
                                     "Also recommend movies already watched.")
flags.mark_flags_as_required(["model_dir", "history"])


def recommend(exported: export.RetrievalExport, history, k: int,
              include_history: bool = False):
  """[(movie id, score)] best first for a history of movie ids (the ratings
  file's, most recent last)."""
  rows = exported.items.rows(history, what="--history: movie id")
  num_items = exported.items.num_items
  if not 1 <= k <= num_items:
    raise ValueError(f"--k={k} must lie in [1, {num_items}] (the model's movies)")
  length = exported.config.max_context_length
  recent_first = list(reversed(rows))[:length]
  context = np.zeros([1, length], np.int32)
  context[0, :len(recent_first)] = recent_first
  scores = exported.scores(tf.constant(context)).numpy()[0]
  if not include_history:
    scores[rows] = -np.inf
  top = np.argsort(-scores, kind="stable")[:k]
  return [(int(movie), float(scores[row]))
          for movie, row in zip(exported.items.ids_of_rows(top), top)]


def main(argv) -> None:
  del argv
  try:
    history = [int(item) for item in _HISTORY.value]
  except ValueError as e:
    raise ValueError(f"--history: {e}") from e
  exported = export.load_export(_MODEL_DIR.value)
  titles = (movies_io.read_movie_titles(_MOVIES_PATH.value)
            if _MOVIES_PATH.value else {})
  recommendations = recommend(exported, history, _K.value, _INCLUDE_HISTORY.value)
  if titles:  # Echo the history, so a typo in an id shows as the wrong movie.
    print("history (most recent last):")
    for item in history:
      print(f"     {item:6d}  {titles.get(item, '(not in --movies_path)')}")
    print(f"top {_K.value}:")
  for rank, (item, score) in enumerate(recommendations, start=1):
    print(f"{rank:3d}. {item:6d}  {score:+.4f}  {titles.get(item, '')}".rstrip())


if __name__ == "__main__":
  cli.run(main)
