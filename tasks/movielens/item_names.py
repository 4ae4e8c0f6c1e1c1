"""Reads items' display names: a MovieLens release's movie titles, or a table
of one's own.

MovieLens: ML-100K `u.item` (`id|title|date|...`, Latin-1), ML-1M/10M
`movies.dat` (`MovieID::Title::Genres`, Latin-1), ML-20M and later
`movies.csv` (`movieId,title,genres`, UTF-8), or a release's directory; ids
are integers. Any other CSV, TSV or Parquet file: `name_column` names the
display name and `id_column` the item id (the log's, as text). A malformed
line is reported with its number.
"""

import os
from typing import Dict, Optional

import pandas as pd

from tasks.movielens import interaction_log
from tasks.movielens.ratings_io import RatingsFormatError

# A release's titles file, in the order a directory is searched.
MOVIE_FILES = ("movies.csv", "movies.dat", "u.item")


def _movielens_rows(path: str):
  """(line number, (id, title)) of a MovieLens titles file."""
  name = os.path.basename(path)
  if name.endswith(".csv"):
    try:
      movies = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.ParserError as e:
      raise RatingsFormatError(f"{path}: {e}") from e
    if list(movies.columns[:2]) != ["movieId", "title"]:
      raise RatingsFormatError(f"{path}:1: expected the header movieId,title,genres")
    return enumerate(zip(movies["movieId"], movies["title"]), start=2)
  separator, fields = ("|", 24) if name == "u.item" else ("::", 3)
  with open(path, encoding="latin-1") as f:
    lines = f.read().splitlines()
  rows = []
  for number, line in enumerate(lines, start=1):
    parts = line.split(separator)
    if len(parts) != fields:
      raise RatingsFormatError(f"{path}:{number}: expected {fields} fields separated "
                               f"by '{separator}', got '{line[:80]}'")
    rows.append((number, (parts[0], parts[1])))
  return rows


def is_movielens_file(path: str) -> bool:
  return os.path.isdir(path) or os.path.basename(path) in MOVIE_FILES or path.endswith(
      (".dat", "u.item"))


def read_item_names(path: str, id_column: Optional[str] = None,
                    name_column: Optional[str] = None) -> Dict[object, str]:
  """Item id -> display name (MovieLens: integer ids; a table of one's own:
  text ids, from `id_column` and `name_column`)."""
  if os.path.isdir(path):
    found = [os.path.join(path, n) for n in MOVIE_FILES
             if os.path.isfile(os.path.join(path, n))]
    if not found:
      raise RatingsFormatError(f"{path}: no MovieLens titles file in this directory "
                               f"(one of {', '.join(MOVIE_FILES)})")
    path = found[0]
  if not os.path.isfile(path):
    raise RatingsFormatError(f"{path}: no such items file")
  if name_column is None:
    if not is_movielens_file(path):
      raise RatingsFormatError(f"{path}: not a MovieLens titles file "
                               f"({', '.join(MOVIE_FILES)}); name its columns with "
                               "--item_name_column (and --item_column)")
    names = {}
    for number, (item_id, title) in _movielens_rows(path):
      if not item_id.strip().isdigit():
        raise RatingsFormatError(f"{path}:{number}: movie id '{item_id}' is not an "
                                 "integer")
      names[int(item_id)] = title
    return names
  id_column = id_column or "item_id"
  table = interaction_log.read_columns(path, (id_column, name_column),
                                       ("item", "item_name"), text=(id_column,))
  ids = (str(i).strip() for i in table[id_column].to_pylist())
  return dict(zip(ids, table[name_column].cast("string").to_pylist()))
