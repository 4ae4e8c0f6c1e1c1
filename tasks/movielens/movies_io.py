"""Reads movie titles: ML-1M `movies.dat` (MovieID::Title::Genres, Latin-1) or
ML-20M/25M `movies.csv` (movieId,title,genres)."""

import os
from typing import Dict

import pandas as pd

from tasks.movielens.ratings_io import RatingsFormatError


def read_movie_titles(path: str) -> Dict[int, str]:
  """Maps movie id -> title; a malformed line is reported with its number."""
  if not os.path.isfile(path):
    raise RatingsFormatError(f"{path}: no such movies file")
  suffix = os.path.splitext(path)[1].lower()
  if suffix == ".csv":
    try:
      movies = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.ParserError as e:
      raise RatingsFormatError(f"{path}: {e}") from e
    if list(movies.columns[:2]) != ["movieId", "title"]:
      raise RatingsFormatError(f"{path}:1: expected the header movieId,title,genres")
    rows = enumerate(zip(movies["movieId"], movies["title"]), start=2)
  elif suffix == ".dat":
    with open(path, encoding="latin-1") as f:
      lines = f.read().splitlines()
    rows = []
    for number, line in enumerate(lines, start=1):
      fields = line.split("::")
      if len(fields) != 3:
        raise RatingsFormatError(
            f"{path}:{number}: expected MovieID::Title::Genres, got '{line[:80]}'")
      rows.append((number, (fields[0], fields[1])))
  else:
    raise RatingsFormatError(f"{path}: unknown movies format '{suffix}'; expected "
                             "movies.dat or movies.csv")
  titles = {}
  for number, (movie_id, title) in rows:
    if not movie_id.strip().isdigit():
      raise RatingsFormatError(f"{path}:{number}: movie id '{movie_id}' is not an integer")
    titles[int(movie_id)] = title
  return titles
