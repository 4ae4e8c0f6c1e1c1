"""Interaction logs of one's own (CSV, TSV, Parquet; any ids, renamed columns)
and every MovieLens release as shipped: read, refused in one line, and a log
with text ids trained, evaluated, exported and served by those ids."""

import os

import numpy as np
import pandas as pd
import pytest

from tasks.movielens import interaction_log
from tasks.movielens import item_names
from tasks.movielens import movielens_task
from tasks.movielens import ratings_io
from tasks.movielens.interaction_log import LogColumns
from tasks.movielens.ratings_io import RatingsFormatError
from tests.script_runs import run_module

COLUMNS = LogColumns(user="customer", item="sku", time="when", rating="stars")
LOG = ("customer,sku,when,stars\n"
       "u_83f1,sku-2291,2024-03-01T10:00:00,5\n"
       "u_83f1,sku-17,2024-03-01T10:00:00,2\n"  # A tie in time: file order.
       "u_9,sku-2291,2024-02-01 08:30,4\n"
       "u_83f1,sku-3,2024-01-01,4\n")


def write(directory, name: str, text: str) -> str:
  path = os.path.join(directory, name)
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return path


def test_a_csv_log_with_text_ids_and_renamed_columns(tmp_path):
  events, items = interaction_log.read_interactions(write(tmp_path, "log.csv", LOG),
                                                    COLUMNS)
  np.testing.assert_array_equal(items.ids, ["", "sku-17", "sku-2291", "sku-3"])
  assert items.is_text and items.rows(["sku-3"]).tolist() == [3]
  assert items.ids_of_rows(events["item_id"]).tolist() == [
      "sku-2291", "sku-17", "sku-2291", "sku-3"]
  assert events["user_id"].tolist() == [0, 0, 1, 0]  # Dense, in order of appearance.
  assert events["rating"].tolist() == [5, 2, 4, 4]
  times = events["timestamp"].to_numpy()
  assert times[0] == times[1] > times[2] > times[3]  # Date-times, in order.
  # Ties keep the file's order: sku-2291 precedes sku-17 in u_83f1's timeline.
  examples = movielens_task.sequence_examples.sliding_window_examples(events, 3, 2)
  assert items.ids_of_rows(examples.labels).tolist() == ["sku-2291", "sku-17"]


def test_min_rating_keeps_the_positives_and_tsv_parquet_read_alike(tmp_path):
  path = write(tmp_path, "log.csv", LOG)
  positives, items = interaction_log.read_interactions(path, COLUMNS, min_rating=4)
  assert items.ids.tolist() == ["", "sku-2291", "sku-3"]
  assert len(positives) == 3
  frame = pd.read_csv(path)
  frame.to_csv(tmp_path / "log.tsv", sep="\t", index=False)
  frame.to_parquet(tmp_path / "log.parquet")
  for other in ("log.tsv", "log.parquet"):
    read, same_items = interaction_log.read_interactions(str(tmp_path / other), COLUMNS)
    assert same_items == interaction_log.read_interactions(path, COLUMNS)[1]
    np.testing.assert_array_equal(read["item_id"], [2, 1, 2, 3])
  numeric = write(tmp_path, "numeric.csv", "user_id,item_id,timestamp\n7,42,3\n7,5,1\n")
  events, items = interaction_log.read_interactions(numeric, LogColumns())
  assert items.ids.tolist() == ["", "42", "5"] and events["timestamp"].tolist() == [3, 1]


@pytest.mark.parametrize("name,text,columns,message", [
    ("log.csv", LOG.replace("sku,", "item,", 1), COLUMNS,
     "log.csv:1: no column 'sku' (--item_column); the header has customer, item, when, "
     "stars"),
    ("log.csv", LOG.replace("u_9", ""), COLUMNS, "log.csv:4: empty id in column 'customer'"),
    ("log.csv", LOG.replace("2024-01-01", "yesterday"), COLUMNS,
     "log.csv:5: time 'yesterday' in column 'when' is neither a number nor a date-time"),
    ("log.csv", LOG.replace("stars", "sku", 1), LogColumns("customer", "sku", "when"),
     "log.csv:1: the header names column 'sku' twice"),
    ("log.csv", "", COLUMNS, "log.csv: empty file (no header line)"),
    ("log.csv", "customer,sku,when,stars\n", COLUMNS, "log.csv: contains no interactions"),
    ("log.csv", LOG.replace(",5\n", ",five\n"), COLUMNS,
     "log.csv:2: rating in column 'stars' is not a number"),
    ("log.json", LOG, COLUMNS, "log.json: unknown interaction log format '.json'; "
     "expected .csv, .tsv (or .txt, tab-separated) or .parquet"),
])
def test_bad_logs_are_refused_in_one_line_naming_file_line_and_column(
    tmp_path, name, text, columns, message):
  with pytest.raises(RatingsFormatError) as error:
    interaction_log.read_interactions(write(tmp_path, name, text), columns)
  assert str(error.value) == f"{tmp_path}/{message}"


def test_a_bad_log_on_the_command_line_is_one_line_and_exit_2_writing_nothing(tmp_path):
  path = write(tmp_path, "log.csv", LOG.replace("u_9", ""))
  result = run_module(
      "scripts.train_federated", f"--interactions_path={path}", "--user_column=customer",
      "--item_column=sku", "--time_column=when", f"--output_dir={tmp_path}/run")
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
      f"error: {path}:4: empty id in column 'customer'")
  assert not os.path.exists(tmp_path / "run")


def write_ml100k(directory) -> str:
  """An ML-100K directory as shipped: u.data (tab-separated, no header) and
  u.item (pipe-separated, Latin-1), sparse-ish ids."""
  os.makedirs(directory)
  write(directory, "u.data", "196\t242\t3\t881250949\n186\t302\t3\t891717742\n"
                             "196\t377\t1\t878887116\n")
  with open(os.path.join(directory, "u.item"), "w", encoding="latin-1") as f:
    genres = "|".join("0" * 19)
    for movie, title in ((242, "Kolya (1996)"), (302, "L.A. Confidential (1997)"),
                         (377, "Heavyweights (1994)"), (1, "Café au lait (1993)")):
      f.write(f"{movie}|{title}|24-Jan-1997||http://x|{genres}\n")
  return str(directory)


def test_every_movielens_release_is_read_as_shipped(tmp_path):
  directory = write_ml100k(tmp_path / "ml-100k")
  for path in (directory, os.path.join(directory, "u.data")):
    ratings = ratings_io.read_ratings(path)
    assert ratings["user_id"].tolist() == [196, 186, 196]
    assert ratings["item_id"].tolist() == [242, 302, 377]
  names = item_names.read_item_names(directory)
  assert names[242] == "Kolya (1996)" and names[1] == "Café au lait (1993)"
  ml10m = tmp_path / "ml-10M100K"
  os.makedirs(ml10m)
  write(ml10m, "ratings.dat", "1::122::5::838985046\n1::185::5::838983525\n")
  with open(ml10m / "movies.dat", "w", encoding="latin-1") as f:
    f.write("122::Boomerang (1992)::Comedy|Romance\n185::Net, The (1995)::Action\n"
            "5::Père (1995)::Drama\n")
  assert ratings_io.read_ratings(str(ml10m))["item_id"].tolist() == [122, 185]
  assert item_names.read_item_names(str(ml10m))[5] == "Père (1995)"
  with pytest.raises(RatingsFormatError, match="no MovieLens ratings file in this "
                                               "directory"):
    ratings_io.read_ratings(str(tmp_path))
  with pytest.raises(RatingsFormatError, match="u.data:2: expected 4 fields"):
    ratings_io.read_ratings(write(tmp_path / "ml-100k", "u.data", "1\t2\t3\t4\n1\t2\n"))


def test_item_names_of_ones_own_by_column(tmp_path):
  path = write(tmp_path, "items.csv", "sku,name,price\nsku-17,Red mug,9\nsku-3,Tea,4\n")
  assert item_names.read_item_names(path, "sku", "name") == {"sku-17": "Red mug",
                                                             "sku-3": "Tea"}
  with pytest.raises(RatingsFormatError, match="no column 'title' .--item_name_column."):
    item_names.read_item_names(path, "sku", "title")


@pytest.mark.runs_long
def test_a_text_id_log_trains_evaluates_exports_and_recommends_by_its_ids(tmp_path):
  """A shop's log with its own ids: trained federatedly, evaluated, exported
  and served by those ids, with display names from its items file."""
  rng = np.random.default_rng(0)
  users = np.repeat([f"u_{i:03x}" for i in range(60)], 12)
  skus = np.array([f"sku-{i}" for i in range(40)])
  items = skus[(np.arange(users.size) + rng.integers(0, 3, users.size)) % 40]
  pd.DataFrame({"customer": users, "sku": items,
                "when": np.tile(np.arange(12), 60) + 1_700_000_000}).to_csv(
                    tmp_path / "shop.csv", index=False)
  pd.DataFrame({"sku": skus, "name": [f"Item number {i}" for i in range(40)]}).to_csv(
      tmp_path / "items.csv", index=False)
  data = [f"--interactions_path={tmp_path}/shop.csv", "--user_column=customer",
          "--item_column=sku", "--time_column=when"]
  run = lambda script, *args: run_module(f"scripts.{script}", *args)
  trained = run("train_federated", *data, "--rounds=6", "--clients_per_round=10",
                "--eval_every=3", f"--output_dir={tmp_path}/run")
  assert trained.returncode == 0, trained.stderr[-3000:]
  assert np.load(tmp_path / "run" / "item_ids.npy").tolist()[:3] == ["", "sku-0", "sku-1"]
  evaluated = run("evaluate", *data, f"--model_dir={tmp_path}/run/export", "--split=test")
  assert evaluated.returncode == 0, evaluated.stderr[-3000:]
  assert '"global_recall@10"' in evaluated.stdout
  served = run("recommend", f"--model_dir={tmp_path}/run/export",
               "--history=sku-3,sku-4", f"--items_path={tmp_path}/items.csv",
               "--item_id_column=sku", "--item_name_column=name", "--k=3")
  assert served.returncode == 0, served.stderr[-3000:]
  lines = served.stdout.splitlines()
  assert lines[:3] == ["history (most recent last):",
                       "      sku-3  Item number 3", "      sku-4  Item number 4"]
  assert len(lines) == 7 and all("sku-" in line and "Item number" in line
                                 for line in lines[4:])
  unknown = run("recommend", f"--model_dir={tmp_path}/run/export", "--history=sku-99")
  assert unknown.returncode == 2
  assert "--history: item id sku-99 is not one of the 40 items" in unknown.stderr
