"""Reads MovieLens rating logs as GroupLens ships every release.

ML-100K `u.data` (tab-separated `user item rating timestamp`, no header),
ML-1M and ML-10M `ratings.dat` (`UserID::MovieID::Rating::Timestamp`), ML-20M,
25M, 32M and ml-latest(-small) `ratings.csv` (header
`userId,movieId,rating,timestamp`); a release's directory may be given
instead of its ratings file (`ratings_file`). Every format becomes one
DataFrame with integer columns `user_id`, `item_id`, `timestamp` and a float
`rating`. Every malformed line is reported with the file name and its 1-based
line number, so a broken log never trains silently.
"""

import os
import re

import numpy as np
import pandas as pd

RATINGS_COLUMNS = ("user_id", "item_id", "rating", "timestamp")
CSV_HEADER = "userId,movieId,rating,timestamp"
_SEPARATORS = {"data": "\t", "dat": "::", "csv": ","}
# A release's ratings file, in the order a directory is searched.
RATINGS_FILES = ("ratings.csv", "ratings.dat", "u.data")
_INTEGER = re.compile(r"\d+")


class RatingsFormatError(ValueError):
  """A ratings file is missing, empty, of an unknown format or malformed."""


def ratings_file(path: str) -> str:
  """The ratings file of a release's directory (`RATINGS_FILES`), or `path`."""
  if not os.path.isdir(path):
    return path
  for name in RATINGS_FILES:
    if os.path.isfile(os.path.join(path, name)):
      return os.path.join(path, name)
  raise RatingsFormatError(f"{path}: no MovieLens ratings file in this directory "
                           f"(one of {', '.join(RATINGS_FILES)})")


def ratings_format(path: str) -> str:
  """Returns 'data', 'dat' or 'csv' from the file name; others are refused."""
  suffix = os.path.splitext(path)[1].lower().lstrip(".")
  if suffix not in _SEPARATORS:
    raise RatingsFormatError(
        f"{path}: unknown ratings format '.{suffix}'; expected a MovieLens "
        "'u.data' (ML-100K), 'ratings.dat' (ML-1M, ML-10M: "
        "UserID::MovieID::Rating::Timestamp) or 'ratings.csv' (ML-20M and later: "
        f"{CSV_HEADER}); a log of one's own: --interactions_path")
  return suffix


def _first_bad_line(mask: np.ndarray, first_line_number: int) -> int:
  return int(np.flatnonzero(mask)[0]) + first_line_number


def read_ratings(path: str) -> pd.DataFrame:
  """Reads a ratings file (or a release's directory) into a DataFrame with
  columns `RATINGS_COLUMNS`."""
  path = ratings_file(path)
  fmt = ratings_format(path)
  if not os.path.isfile(path):
    raise RatingsFormatError(f"{path}: no such ratings file")
  with open(path, encoding="utf-8", errors="replace") as f:
    lines = f.read().splitlines()
  first_line_number = 1
  if fmt == "csv" and lines:
    if lines[0].strip() != CSV_HEADER:
      raise RatingsFormatError(
          f"{path}:1: expected the header '{CSV_HEADER}', got '{lines[0][:80]}'")
    lines = lines[1:]
    first_line_number = 2
  if not lines:
    raise RatingsFormatError(f"{path}: contains no ratings")

  separator = _SEPARATORS[fmt]
  text = pd.Series(lines, dtype=object)
  field_counts = text.str.count(re.escape(separator)).to_numpy() + 1
  wrong_count = field_counts != 4
  if wrong_count.any():
    line = _first_bad_line(wrong_count, first_line_number)
    raise RatingsFormatError(
        f"{path}:{line}: expected 4 fields separated by {separator!r}, found "
        f"{field_counts[line - first_line_number]}: "
        f"'{lines[line - first_line_number][:80]}'")
  fields = text.str.split(separator, n=3, expand=True, regex=False)

  columns = {}
  for index, name in enumerate(RATINGS_COLUMNS):
    values = fields[index].str.strip()
    if name == "rating":
      numeric = pd.to_numeric(values, errors="coerce").to_numpy(np.float64)
      bad = ~np.isfinite(numeric)
      if bad.any():
        line = _first_bad_line(bad, first_line_number)
        raise RatingsFormatError(
            f"{path}:{line}: rating '{values.iloc[line - first_line_number]}' "
            "is not a number")
      columns[name] = numeric.astype(np.float32)
      continue
    is_integer = values.str.fullmatch(_INTEGER).to_numpy(bool)
    if name == "timestamp":
      negative = values.str.fullmatch(r"-\d+").to_numpy(bool)
      if negative.any():
        line = _first_bad_line(negative, first_line_number)
        raise RatingsFormatError(
            f"{path}:{line}: negative timestamp "
            f"'{values.iloc[line - first_line_number]}'")
    if not is_integer.all():
      line = _first_bad_line(~is_integer, first_line_number)
      raise RatingsFormatError(
          f"{path}:{line}: {name} '{values.iloc[line - first_line_number]}' "
          "is not a non-negative integer")
    columns[name] = values.to_numpy().astype(np.int64)
  padding = columns["item_id"] == 0
  if padding.any():
    line = _first_bad_line(padding, first_line_number)
    raise RatingsFormatError(
        f"{path}:{line}: item_id 0 is reserved for padding; ids start at 1")
  return pd.DataFrame(columns, columns=list(RATINGS_COLUMNS))


def write_ratings_dat(ratings: pd.DataFrame, path: str) -> None:
  """Writes ratings in the ML-1M `ratings.dat` format (atomically)."""
  lines = (ratings["user_id"].astype(np.int64).astype(str) + "::" +
           ratings["item_id"].astype(np.int64).astype(str) + "::" +
           ratings["rating"].round().astype(np.int64).astype(str) + "::" +
           ratings["timestamp"].astype(np.int64).astype(str))
  temporary = path + ".tmp"
  with open(temporary, "w", encoding="utf-8") as f:
    f.write("\n".join(lines.tolist()))
    f.write("\n")
  os.replace(temporary, path)
