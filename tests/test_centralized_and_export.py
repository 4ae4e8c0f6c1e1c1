"""Centralized training on the small preset, resume, export round trip, evaluate job."""

import csv
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval import export
from fed_retrieval.evaluation import retrieval_evaluation
from fed_retrieval.models import xc_encoder
from losses.registry import ObjectiveConfig
from tasks.movielens import movielens_task
from tests.configs import movielens_centralized_job
from tests.configs import train_movielens_centrally
from tasks.movielens.item_vocabulary import ItemVocabulary
from tests.script_runs import run_module

# One pytest-xdist worker (`make test`'s --dist loadgroup) trains `trained_run`.
pytestmark = pytest.mark.xdist_group("centralized_and_export")


@pytest.fixture(scope="module")
def small_task(tmp_path_factory):
  return movielens_task.build_task(movielens_task.TaskConfig(
      synthetic="small", cache_dir=str(tmp_path_factory.mktemp("cache"))))


@pytest.fixture(scope="module")
def trained_run(small_task, tmp_path_factory):
  output_dir = str(tmp_path_factory.mktemp("central"))
  results = train_movielens_centrally(small_task, output_dir, "hinge_spreadout", epochs=3)
  return output_dir, ObjectiveConfig("hinge_spreadout"), results


def test_training_lowers_the_loss_and_beats_popularity(small_task, trained_run):
  output_dir, config, results = trained_run
  with open(os.path.join(output_dir, "metrics.csv")) as f:
    losses = [float(row["loss"]) for row in csv.DictReader(f)]
  # The Frobenius spreadout of n unit rows in d dims is at least
  # sqrt(n^2 / d - n) (a tight frame): only the loss above that can go.
  n, d = small_task.vocabulary_size - 1, 16
  floor = config.build().spreadout.item * np.sqrt(n * n / d - n)
  assert len(losses) == 3 and losses[-1] - floor < 0.9 * (losses[0] - floor)
  test = results["test"]
  popular = results["most_popular_baseline"]
  assert test["global_recall@10"] > 2 * popular["global_recall@10"]
  assert test["global_recall@1"] <= test["global_recall@5"] <= test["global_recall@10"]
  assert results["setting"] == "centralized" and results["loss"] == "hinge_spreadout"
  assert set(test) == {"global_recall@1", "global_recall@5", "global_recall@10",
                       "batch_recall@1", "batch_recall@5", "batch_recall@10",
                       "global_mean_rank", "global_recall@10_se"}
  assert 0 < test["global_recall@10_se"] < test["global_recall@10"]


def test_finished_run_resumes_to_its_results_and_refuses_other_configs(
    small_task, trained_run):
  output_dir, _, results = trained_run
  again = train_movielens_centrally(small_task, output_dir, "hinge_spreadout", epochs=3)
  assert again == results
  with pytest.raises(ValueError, match="another configuration.*loss"):
    train_movielens_centrally(small_task, output_dir, "global_softmax", epochs=3)


def test_export_round_trip(small_task, trained_run):
  output_dir, _, _ = trained_run
  exported = export.load_export(os.path.join(output_dir, "export"),
                                small_task.items)
  contexts = tf.constant(small_task.federated_test.contexts[:32])
  scores = exported.scores(contexts).numpy()
  # The synthetic ids are dense already: movie id = row.
  index_scores, index_ids = exported.load_index()(tf.cast(contexts, tf.int64))
  np.testing.assert_array_equal(index_ids.numpy(), np.argsort(-scores, axis=1)[:, :10])
  np.testing.assert_allclose(index_scores.numpy(), -np.sort(-scores, axis=1)[:, :10],
                             rtol=1e-5)
  served = exported.load_index().signatures["serving_default"](
      item_ids=tf.cast(contexts, tf.int64))
  np.testing.assert_array_equal(served["output_1"], index_ids)  # (scores, ids).
  with pytest.raises(ValueError, match="exported for 400 items .ids 1..400., but "
                     "the data has 500 .ids 1..500."):
    export.load_export(os.path.join(output_dir, "export"),
                       ItemVocabulary.of_items(range(1, 501)))
  with pytest.raises(FileNotFoundError, match="no such export directory"):
    export.load_export(os.path.join(output_dir, "missing"))


def test_an_export_with_a_savedmodel_query_tower_still_loads(small_task, trained_run,
                                                           tmp_path):
  """Exports written before `query_tower.keras` hold the tower as a SavedModel."""
  output_dir, _, _ = trained_run
  older = str(tmp_path / "older")
  shutil.copytree(os.path.join(output_dir, "export"), older)
  tower = os.path.join(older, export.QUERY_TOWER)
  tf.keras.models.load_model(tower, compile=False).save(os.path.join(older, "query_tower"))
  os.remove(tower)
  contexts = tf.constant(small_task.federated_test.contexts[:8])
  np.testing.assert_allclose(
      export.load_export(older).scores(contexts),
      export.load_export(os.path.join(output_dir, "export")).scores(contexts), rtol=1e-6)


def run_script(name, *args):
  return run_module(f"scripts.{name}", *args)


def test_evaluate_job_agrees_with_training(trained_run, tmp_path):
  output_dir, _, results = trained_run
  cache = os.path.join(tmp_path, "cache")
  reexport = os.path.join(tmp_path, "reexported")
  exported = run_script("export", f"--run_dir={output_dir}", f"--export_dir={reexport}")
  assert exported.returncode == 0, exported.stderr
  evaluated = run_script("evaluate", f"--model_dir={reexport}", "--synthetic=small",
                         f"--cache_dir={cache}", "--split=test",
                         f"--output={tmp_path}/eval.json")
  assert evaluated.returncode == 0, evaluated.stderr
  with open(os.path.join(tmp_path, "eval.json")) as f:
    numbers = json.load(f)["test"]
  for key, value in results["test"].items():
    assert numbers[key] == pytest.approx(value, abs=1e-6), (key, numbers, results)
  recommended = run_script("recommend", f"--model_dir={reexport}", "--history=5,9,17",
                           "--k=3")
  assert recommended.returncode == 0, recommended.stderr
  lines = recommended.stdout.strip().splitlines()
  assert [line.split()[0] for line in lines] == ["1.", "2.", "3."]
  assert not {5, 9, 17} & {int(line.split()[1]) for line in lines}
  movies = tmp_path / "movies.csv"
  movies.write_text("movieId,title,genres\n5,Five (1995),Drama\n9,Nine (1996),Drama\n")
  echoed = run_script("recommend", f"--model_dir={reexport}", "--history=5,9,17",
                      "--k=2", f"--items_path={movies}")
  assert echoed.returncode == 0, echoed.stderr
  assert echoed.stdout.splitlines()[:5] == [
      "history (most recent last):", "          5  Five (1995)", "          9  Nine (1996)",
      "         17  (not in --items_path)", "top 2:"]
  unknown = run_script("recommend", f"--model_dir={reexport}", "--history=5,4000")
  assert unknown.returncode == 2
  assert unknown.stderr.strip().splitlines()[-1].startswith(
      "error: --history: item id 4000 is not one of the 400 items the model knows")


def test_an_approximate_export_states_its_recall_and_serves(small_task, trained_run,
                                                           tmp_path):
  output_dir, _, results = trained_run
  approximate = str(tmp_path / "approximate")
  exported = run_script("export", f"--run_dir={output_dir}", f"--export_dir={approximate}",
                        "--index=approximate", "--index_recall=0.99")
  assert exported.returncode == 0, exported.stderr
  loaded = export.load_export(approximate, small_task.items)
  info = loaded.index_info
  assert info.kind == "approximate" and info.num_rows == 400
  assert info.recall["recall@10"] >= 0.99 and 1 <= info.params["nprobe"] <= info.params["nlist"]
  assert not os.path.exists(os.path.join(approximate, "index"))  # No brute-force model.
  # The exact index through the same path: the training run's own recall.
  test = small_task.federated_test
  exact = loaded.item_index("brute_force")
  same = retrieval_evaluation.index_recall(loaded.query_tower, exact, exact, test)
  assert same["index_recall@10"] == 1.0
  assert same["index_global_recall@10"] == pytest.approx(
      results["test"]["global_recall@10"], abs=0.005)  # Ties count here.
  evaluated = run_script("evaluate", f"--model_dir={approximate}", "--synthetic=small",
                         f"--cache_dir={tmp_path}/cache", "--split=test")
  assert evaluated.returncode == 0, evaluated.stderr
  numbers = json.loads(evaluated.stdout)
  assert numbers["index"]["params"] == info.params
  assert numbers["test"]["global_recall@10"] == pytest.approx(
      results["test"]["global_recall@10"], abs=1e-6)
  assert numbers["test"]["index_recall@10"] >= 0.95
  assert abs(numbers["test"]["index_global_recall@10"] -
             numbers["test"]["global_recall@10"]) < 0.02
  scores, rows = loaded.top_k(test.contexts[:20], 10)
  assert (rows >= 1).all() and (np.diff(scores, axis=1) <= 0).all()
  assert loaded.item_index() is loaded.item_index("approximate")  # Loaded once.
  refused = run_script("recommend", f"--model_dir={output_dir}/export",
                       "--history=5,9", "--index=approximate")
  assert refused.returncode == 2
  assert refused.stderr.strip().splitlines()[-1] == (
      f"error: --model_dir={output_dir}/export holds no approximate index (it was "
      "exported with --index=brute_force): export again with --index=approximate")


@pytest.mark.parametrize("script,args,message", [
    ("evaluate", ["--model_dir=/nonexistent", "--synthetic=small"],
     "--model_dir=/nonexistent: no such export directory"),
    ("train_centralized", ["--synthetic=small", "--output_dir=/tmp/x", "--loss=softmax"],
     "--loss"),
    ("recommend", ["--model_dir=/nonexistent", "--history=1"], "no such export"),
])
def test_scripts_reject_bad_input_by_name(script, args, message):
  result = run_script(script, *args)
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]  # (Progress lines may come first.)
  assert last.startswith("error: ") and message in last and "FATAL" not in result.stderr


def test_a_finished_run_given_more_epochs_trains_on_to_one_run_of_them(
    small_task, tmp_path):
  extended = str(tmp_path / "extended")
  train_movielens_centrally(small_task, extended, "global_softmax", epochs=1)
  results = train_movielens_centrally(small_task, extended, "global_softmax", epochs=2)
  expected = train_movielens_centrally(small_task, str(tmp_path / "one"),
                                       "global_softmax", epochs=2)
  assert results["steps"] == expected["steps"] == 2 * (results["steps"] // 2)
  losses = {}
  for name in ("extended", "one"):
    with open(os.path.join(tmp_path, name, "metrics.csv")) as f:
      rows = list(csv.DictReader(f))
    assert [int(row["epoch"]) for row in rows] == [0, 1]
    losses[name] = [float(row["loss"]) for row in rows]
  # The second pass goes on from the first one's weights and optimizer state
  # (Keras restores no data order: its batches differ from the single run's).
  assert losses["extended"][0] == losses["one"][0]
  assert losses["extended"][1] == pytest.approx(losses["one"][1], rel=0.05)
  assert losses["extended"][1] < 0.9 * losses["extended"][0]


def test_the_centralized_step_compiles_with_xla_where_chosen(small_task):
  # By default for the objectives with spreadout, and for global softmax under
  # plain SGD (not Adam); the flag overrides either way.
  runs = [("batch_softmax", "adam", None, False), ("batch_softmax", "sgd", None, False),
          ("batch_softmax_spreadout", "adam", None, True), ("hinge", "sgd", None, False),
          ("hinge_spreadout", "adam", None, True), ("global_softmax", "adam", None, False),
          ("global_softmax", "sgdm", None, False), ("global_softmax", "sgd", None, True),
          ("global_softmax", "adam", True, True), ("hinge_spreadout", "adam", False, False)]
  chosen = []
  for loss, optimizer, jit_compile, _ in runs:
    job, config = movielens_centralized_job(small_task, loss, jit_compile=jit_compile,
                                            optimizer=optimizer)
    chosen.append(job.jit_compile if config.jit_compile is None else config.jit_compile)
  assert chosen == [xla for *_, xla in runs]


@pytest.mark.parametrize("loss", ["batch_softmax_spreadout", "global_softmax"])
def test_xla_trains_the_same_model(small_task, tmp_path, loss):
  # The same 40 Adam steps from the same seed, with and without XLA, give the
  # same item embeddings (the [B, B] path with spreadout, and the [B, V] one).
  items = {}
  for jit_compile in (False, True):
    output_dir = str(tmp_path / f"xla_{jit_compile}")
    train_movielens_centrally(small_task, output_dir, loss, "example", jit_compile,
                              epochs=None, steps=40)
    items[jit_compile] = np.load(os.path.join(output_dir, "export",
                                              "item_embeddings.npy"))
  np.testing.assert_allclose(items[True], items[False], atol=2e-4)


def test_the_curve_of_an_example_split_run_is_named_test(small_task, tmp_path):
  train_movielens_centrally(small_task, str(tmp_path), "batch_softmax", "example",
                            epochs=None, steps=50)
  with open(os.path.join(tmp_path, "metrics.csv")) as f:
    rows = list(csv.DictReader(f))
  assert rows and all(row["test_global_recall@10"] for row in rows)
  # (Keras's CSVLogger adds empty val_ columns when a log has none.)
  assert not [key for row in rows for key, value in row.items()
              if key.startswith("val_") and value]


@pytest.mark.parametrize("scoring", ["cosine", "dot"])
def test_an_xc_export_scores_as_its_model_does(tmp_path, scoring):
  """The exported tower's embeddings against the exported rows give the
  model's ranking: unit rows for cosines, the raw ones for dot products."""
  config = xc_encoder.XCEncoderConfig(num_features=30, num_labels=12, bag_dim=8,
                                      hidden_dims=(), embedding_dim=8, scoring=scoring)
  model = xc_encoder.build_xc_classifier(config, seed=1)
  table = xc_encoder.class_table(model)
  table.assign(table * np.linspace(0.5, 3.0, 12, dtype=np.float32)[:, None])
  export.export_xc_classifier(model, config, str(tmp_path / "export"))
  rows = np.load(tmp_path / "export" / "class_embeddings.npy")
  tower = tf.keras.models.load_model(str(tmp_path / "export" / "instance_tower"),
                                     compile=False)
  features = (np.array([[3, 7, 0], [1, 2, 30]], np.int32),
              np.array([[0.5, 1.0, 0], [1, 1, 1]], np.float32))
  scores = tower(features).numpy() @ rows.T
  logits = model(features).numpy()
  np.testing.assert_array_equal(np.argsort(-scores, axis=1), np.argsort(-logits, axis=1))
  norms = np.linalg.norm(rows, axis=1)
  if scoring == "cosine":
    np.testing.assert_allclose(norms, 1.0, rtol=1e-5)
  else:
    np.testing.assert_allclose(rows, table.numpy())
    np.testing.assert_allclose(scores, logits, rtol=1e-5)
