"""Dense item ids: the vocabulary, the task built on sparse movie ids, and the
export, index and scripts that speak the file's ids."""

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval import export
from fed_retrieval.training import run_directory
from tasks.movielens import item_vocabulary
from tasks.movielens import movielens_task
from tasks.movielens.item_vocabulary import ItemVocabulary
from tests.configs import train_movielens_centrally
from tests.script_runs import run_module

# One pytest-xdist worker (`make test`'s --dist loadgroup) makes `sparse_run`.
pytestmark = pytest.mark.xdist_group("item_vocabulary")

# Sparse movie ids, as in ml-latest-small (9,724 movies, ids up to 193,609).
MOVIE_IDS = np.array([3, 50, 51, 700, 1_000, 5_000, 20_000, 70_000, 150_000, 193_609])

def test_rows_and_ids_round_trip():
  items = ItemVocabulary.of_items([700, 3, 193_609, 3, 50])
  np.testing.assert_array_equal(items.ids, [0, 3, 50, 700, 193_609])
  assert (items.size, items.num_items) == (5, 4)
  np.testing.assert_array_equal(items.rows([[193_609, 3], [50, 700]]), [[4, 1], [2, 3]])
  np.testing.assert_array_equal(items.ids_of_rows([4, 2]), [193_609, 50])

@pytest.mark.parametrize("unknown", [4, 0, 200_000])
def test_unknown_movie_is_named(unknown):
  items = ItemVocabulary.of_items([3, 50, 700])
  with pytest.raises(item_vocabulary.UnknownItemError,
                     match=f"--history: movie id {unknown} is not one of the 3 items "
                     r"the model knows \(ids 3..700\)"):
    items.rows([50, unknown], what="--history: movie id")

def test_save_load_digest_and_identity_for_old_exports(tmp_path):
  items = ItemVocabulary.of_items(MOVIE_IDS)
  items.save(str(tmp_path))
  assert item_vocabulary.load(str(tmp_path)) == items
  assert items.describe() == {"items": 10, "item_ids_sha256": items.digest()}
  assert ItemVocabulary.of_items(MOVIE_IDS[:-1]).digest() != items.digest()
  old = item_vocabulary.load(str(tmp_path / "old"), size_if_missing=4)
  np.testing.assert_array_equal(old.ids, [0, 1, 2, 3])
  with pytest.raises(FileNotFoundError, match="no item_ids.npy"):
    item_vocabulary.load(str(tmp_path / "old"))

def write_sparse_ratings(directory) -> str:
  """60 users, each rating a run of 8 consecutive movies of MOVIE_IDS (cyclic),
  in order: the next movie is predictable from the previous ones."""
  rng = np.random.default_rng(0)
  lines = ["userId,movieId,rating,timestamp"]
  for user in range(1, 61):
    start = rng.integers(len(MOVIE_IDS))
    for step in range(8):
      movie = MOVIE_IDS[(start + step) % len(MOVIE_IDS)]
      lines.append(f"{user},{movie},4.0,{1000 + step}")
  path = os.path.join(directory, "ratings.csv")
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  with open(os.path.join(directory, "movies.csv"), "w") as f:
    f.write("movieId,title,genres\n" + "".join(
        f'{movie},"Movie {movie}, The (1999)",Drama\n' for movie in MOVIE_IDS))
  return path

@pytest.fixture(scope="module")
def sparse_run(tmp_path_factory):
  directory = tmp_path_factory.mktemp("sparse")
  task = movielens_task.build_task(movielens_task.TaskConfig(
      ratings_path=write_sparse_ratings(str(directory)), max_context_length=3))
  output_dir = str(directory / "run")
  train_movielens_centrally(task, output_dir, "global_softmax", epochs=20)
  return task, directory, output_dir

def test_task_numbers_movies_densely(sparse_run):
  task, _, _ = sparse_run
  assert task.vocabulary_size == 11 and task.statistics()["largest_item_id"] == 193_609
  for split in (task.federated_train, task.centralized_test):
    assert split.labels.min() >= 1 and split.labels.max() <= 10
    assert split.contexts.max() <= 10
  # User rows follow the file: each next movie is the following id of MOVIE_IDS.
  examples = task.federated_train
  has_previous = examples.contexts[:, 0] > 0
  np.testing.assert_array_equal(
      examples.labels[has_previous], examples.contexts[has_previous, 0] % 10 + 1)

def test_export_index_answers_in_file_ids(sparse_run):
  task, _, output_dir = sparse_run
  exported = export.load_export(os.path.join(output_dir, "export"), task.items)
  assert exported.items == task.items
  assert item_vocabulary.load(output_dir) == task.items  # Beside the run.
  rows = task.federated_test.contexts[:16]
  scores = exported.scores(tf.constant(rows)).numpy()
  index_scores, index_ids = exported.load_index()(
      tf.constant(task.items.ids_of_rows(rows) * (rows > 0)))
  top_rows = np.argsort(-scores, axis=1)[:, :10]
  np.testing.assert_array_equal(index_ids.numpy(), MOVIE_IDS[top_rows - 1])
  np.testing.assert_allclose(index_scores.numpy(), -np.sort(-scores, axis=1)[:, :10],
                             rtol=1e-5)

def test_an_unknown_movie_id_in_a_served_context_is_ignored(sparse_run):
  _, _, output_dir = sparse_run
  index = export.load_export(os.path.join(output_dir, "export")).load_index()
  with_unknown = index(tf.constant([[50, 999, 0]], tf.int64))
  without = index(tf.constant([[50, 0, 0]], tf.int64))
  np.testing.assert_array_equal(with_unknown[1].numpy(), without[1].numpy())

def run_script(name, *args):
  return run_module(f"scripts.{name}", *args)

def test_recommend_speaks_the_files_ids_and_titles(sparse_run):
  _, directory, output_dir = sparse_run
  result = run_script("recommend", f"--model_dir={output_dir}/export",
                      "--history=3,50,51", "--k=3",
                      f"--items_path={directory}/movies.csv")
  assert result.returncode == 0, result.stderr
  lines = result.stdout.strip().splitlines()
  assert lines[:5] == ["history (most recent last):", "          3  Movie 3, The (1999)",
                       "         50  Movie 50, The (1999)",
                       "         51  Movie 51, The (1999)",
                       "top 3:"]
  lines = lines[5:]
  movies = [int(line.split()[1]) for line in lines]
  # One embedding table serves both towers and the context is its mean, so a
  # run's two neighbours (700 after it, 193,609 before it: the runs are
  # cyclic) are equally close to 3, 50, 51; chance puts them first 1 in 21.
  assert set(movies[:2]) == {700, 193_609}
  assert set(movies) <= set(MOVIE_IDS) - {3, 50, 51}
  for movie, line in zip(movies, lines):
    assert line.endswith(f"Movie {movie}, The (1999)")
  unknown = run_script("recommend", f"--model_dir={output_dir}/export",
                       "--history=3,4")
  assert unknown.returncode == 2
  assert ("--history: item id 4 is not one of the 10 items the model knows "
          "(ids 3..193609)") in unknown.stderr

def test_runs_from_before_dense_ids_are_refused_by_name(sparse_run, tmp_path):
  task, _, output_dir = sparse_run
  old_dir = tmp_path / "old_run"
  old_dir.mkdir()
  with open(os.path.join(output_dir, run_directory.RUN_CONFIG)) as f:
    config = json.load(f)
  for key in ("items", "item_ids_sha256"):
    del config["task"][key]
  with open(old_dir / run_directory.RUN_CONFIG, "w") as f:
    json.dump(config, f)
  with pytest.raises(ValueError, match=r"task.item_ids_sha256: None -> '[0-9a-f]{16}'; "
                     r"task.items: None -> 10"):
    train_movielens_centrally(task, str(old_dir), "global_softmax", epochs=20)
  shutil.copytree(os.path.join(output_dir, "checkpoint"), old_dir / "checkpoint")
  result = run_script("export", f"--run_dir={old_dir}", f"--export_dir={tmp_path}/e")
  assert result.returncode == 2
  assert (f"--run_dir={old_dir}: no item_ids.npy; the run was trained before item "
          "ids were made dense") in result.stderr
