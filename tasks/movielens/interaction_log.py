"""Reads an interaction log of one's own: CSV, TSV or Parquet, columns by name.

A log is one event a row: a user, an item, a time, and optionally a rating
(`LogColumns` names them; `min_rating` keeps the events rated at least that,
the positives, and needs the rating). Ids may be any strings or numbers: they are read as text, and
items become dense rows 1..N of an `ItemVocabulary` of those strings (row 0
pads), which run directories and exports carry so that every script speaks
the file's own ids. Times are numbers (e.g. Unix seconds) or date-times
(ISO 8601 and what pandas parses); ties keep the file's order.

The file is read by pyarrow, and ids are turned into codes without a Python
object per row, so a log of tens of millions of events fits in memory. Bad
input stops with one line naming the file, the line (CSV/TSV, 1-based,
the header being line 1) or row (Parquet, 1-based) and the column: a missing
column, an empty id, an unparsable time or rating, a duplicate header, an
empty file.
"""

import csv
import dataclasses
import os
from typing import Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from tasks.movielens.item_vocabulary import ItemVocabulary
from tasks.movielens.ratings_io import RATINGS_COLUMNS
from tasks.movielens.ratings_io import RatingsFormatError

FORMATS = {".csv": ",", ".tsv": "\t", ".txt": "\t", ".parquet": None}


@dataclasses.dataclass(frozen=True)
class LogColumns:
  """The log's column names (flags --user_column, --item_column,
  --time_column, --rating_column)."""
  user: str = "user_id"
  item: str = "item_id"
  time: str = "timestamp"
  rating: Optional[str] = None

  def __post_init__(self):
    named = [self.user, self.item, self.time] + ([self.rating] if self.rating else [])
    if len(set(named)) != len(named):
      raise ValueError(f"--user_column, --item_column, --time_column and "
                       f"--rating_column name one column twice: {named}")

  def names(self) -> Tuple[str, ...]:
    return (self.user, self.item, self.time) + ((self.rating,) if self.rating else ())


def log_format(path: str) -> Optional[str]:
  """The field separator of a log by its suffix (None: Parquet)."""
  suffix = os.path.splitext(path)[1].lower()
  if suffix not in FORMATS:
    raise RatingsFormatError(f"{path}: unknown interaction log format '{suffix}'; "
                             "expected .csv, .tsv (or .txt, tab-separated) or .parquet")
  return FORMATS[suffix]


def _where(path: str, separator: Optional[str], row: int) -> str:
  """'FILE:LINE' of a text log's 0-based data row; 'FILE: row N' of Parquet's."""
  return f"{path}: row {row + 1}" if separator is None else f"{path}:{row + 2}"


def read_columns(path: str, names: Sequence[str], flag_names: Sequence[str],
                 text: Sequence[str] = ()) -> pa.Table:
  """The named columns of a CSV, TSV or Parquet file (those of `text` read as
  text), refusing a missing file, an empty one, a header that names a column
  twice, or a column it lacks (naming the flag `--<flag name>_column` that
  asked for it)."""
  separator = log_format(path)
  if not os.path.isfile(path):
    raise RatingsFormatError(f"{path}: no such file")
  if separator is None:
    header = pq.read_schema(path).names
  else:
    with open(path, encoding="utf-8", errors="replace") as f:
      first = f.readline().rstrip("\r\n")
    if not first:
      raise RatingsFormatError(f"{path}: empty file (no header line)")
    header = next(csv.reader([first], delimiter=separator))
  repeated = sorted({name for name in header if header.count(name) > 1})
  if repeated:
    raise RatingsFormatError(f"{path}:1: the header names column '{repeated[0]}' twice")
  for flag, name in zip(flag_names, names):
    if name not in header:
      raise RatingsFormatError(f"{path}:1: no column '{name}' (--{flag}_column); the "
                               f"header has {', '.join(header)}")
  if separator is None:
    return pq.read_table(path, columns=list(names))
  try:
    return pa_csv.read_csv(path, parse_options=pa_csv.ParseOptions(delimiter=separator),
                           convert_options=pa_csv.ConvertOptions(
                               include_columns=list(names),
                               column_types={name: pa.string() for name in text},
                               strings_can_be_null=True))
  except pa.ArrowInvalid as e:
    raise RatingsFormatError(f"{path}: {str(e).splitlines()[0]}") from e


def _ids(table: pa.Table, name: str, where) -> pa.Array:
  """A column of ids as text, refusing an empty one by row."""
  ids = pc.utf8_trim_whitespace(table[name].cast(pa.string()).combine_chunks())
  empty = pc.fill_null(pc.equal(ids, ""), True).to_numpy(zero_copy_only=False)
  if empty.any():
    raise RatingsFormatError(f"{where(int(np.flatnonzero(empty)[0]))}: empty id in "
                             f"column '{name}'")
  return ids


def _times(column: pa.ChunkedArray, name: str, where) -> np.ndarray:
  """Event times as numbers that sort as the times do."""
  if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
    values = column.to_numpy().astype(np.float64)
    bad = ~np.isfinite(values)
  elif pa.types.is_timestamp(column.type) or pa.types.is_date(column.type):
    values = pc.cast(column, pa.timestamp("ns")).to_numpy().astype(np.int64)
    bad = pc.is_null(column).to_numpy(zero_copy_only=False)
  else:  # ISO 8601 at C speed; any other form pandas parses, value by value.
    text = column.to_pandas()
    parsed = pd.to_datetime(text, errors="coerce", utc=True, format="ISO8601")
    others = parsed.isna() & text.notna()
    if others.any():
      parsed[others] = pd.to_datetime(text[others], errors="coerce", utc=True,
                                      format="mixed")
    bad = parsed.isna().to_numpy()
    values = parsed.to_numpy(np.int64, na_value=0)
  if bad.any():
    row = int(np.flatnonzero(bad)[0])
    raise RatingsFormatError(f"{where(row)}: time '{column[row].as_py()}' in column "
                             f"'{name}' is neither a number nor a date-time")
  return values


def read_interactions(path: str, columns: LogColumns,
                      min_rating: Optional[float] = None
                      ) -> Tuple[pd.DataFrame, ItemVocabulary]:
  """(events with `RATINGS_COLUMNS`: dense user ids, dense item rows, rating,
  time; the item vocabulary of the file's ids)."""
  if min_rating is not None and columns.rating is None:
    raise ValueError("--min_rating needs --rating_column")
  separator = log_format(path)
  table = read_columns(path, columns.names(), ("user", "item", "time", "rating"),
                       text=(columns.user, columns.item))
  if table.num_rows == 0:
    raise RatingsFormatError(f"{path}: contains no interactions")
  where = lambda row: _where(path, separator, row)
  users = _ids(table, columns.user, where)
  items = _ids(table, columns.item, where)
  times = _times(table[columns.time], columns.time, where)
  ratings = np.ones(table.num_rows, np.float32)
  if columns.rating:
    ratings = pd.to_numeric(table[columns.rating].to_pandas(),
                            errors="coerce").to_numpy(np.float64)
    if not np.all(np.isfinite(ratings)):
      row = int(np.flatnonzero(~np.isfinite(ratings))[0])
      raise RatingsFormatError(f"{where(row)}: rating in column '{columns.rating}' is "
                               "not a number")
  keep = (ratings >= min_rating if min_rating is not None
          else np.ones(len(ratings), bool))
  if not keep.any():
    raise RatingsFormatError(f"{path}: no event is rated >= --min_rating={min_rating}")
  user_codes = pc.dictionary_encode(users).indices.to_numpy()[keep]
  encoded = pc.dictionary_encode(items)
  names = encoded.dictionary.to_numpy(zero_copy_only=False).astype(str)
  item_codes = encoded.indices.to_numpy()[keep]
  present = np.unique(item_codes)
  vocabulary = ItemVocabulary.of_items(names[present])
  code_to_row = np.zeros(len(names), np.int32)
  code_to_row[present] = vocabulary.rows(names[present])
  frame = pd.DataFrame({"user_id": user_codes.astype(np.int64),
                        "item_id": code_to_row[item_codes],
                        "rating": ratings[keep].astype(np.float32),
                        "timestamp": times[keep]}, columns=list(RATINGS_COLUMNS))
  return frame, vocabulary
