"""Dense item ids: the items a log holds, numbered 1..N (0 is padding).

A file's ids are sparse numbers (ml-latest-small: 9,724 movies with ids up to
193,609) or strings of any kind (an interaction log's 'sku-2291'), and a table
indexed by the raw id would be far larger than the data, or impossible. Every
model, example and export uses the dense row instead; `ItemVocabulary` maps
between the two and travels with prepared data, run directories and exports
as `item_ids.npy` (row r holds the file's id of row r: integers, or text), so
the scripts still speak the file's own ids.
"""

import dataclasses
import hashlib
import os
from typing import Optional, Sequence

import numpy as np

from tasks.movielens.sequence_examples import PADDING_ID

FILE = "item_ids.npy"


class UnknownItemError(ValueError):
  """A movie id that is not in the vocabulary."""


def _padding(ids: np.ndarray):
  """Row 0's id: 0 for integer ids, '' for text ids."""
  return "" if ids.dtype.kind == "U" else PADDING_ID


@dataclasses.dataclass(frozen=True, eq=False)
class ItemVocabulary:
  """`ids[row]` is the file's id of dense row `row`; row 0 is padding (0, or
  '' for text ids)."""
  ids: np.ndarray  # int64 or str [size], strictly increasing after row 0.

  def __post_init__(self):
    ids = self.ids
    if ids.ndim != 1 or ids.size < 2 or ids[0] != _padding(ids):
      raise ValueError(f"an item vocabulary is [{_padding(ids)!r}, id_1, ..., id_n] "
                       f"with n >= 1, got {ids[:5].tolist()}... of shape {ids.shape}")
    if np.any(ids[2:] <= ids[1:-1]) or ids[1] <= _padding(ids):
      raise ValueError("the ids of an item vocabulary must be strictly increasing "
                       "after the padding")

  @classmethod
  def of_items(cls, ids: Sequence) -> "ItemVocabulary":
    """The vocabulary of the distinct ids given (in ascending order): integers,
    or text when any is not one."""
    ids = np.asarray(ids)
    ids = ids.astype(str) if ids.dtype.kind in "UOS" else ids.astype(np.int64)
    distinct = np.unique(ids)
    return cls(np.concatenate([np.array([_padding(ids)], ids.dtype), distinct]))

  @property
  def is_text(self) -> bool:
    return self.ids.dtype.kind == "U"

  def parse(self, values: Sequence[str], what: str) -> np.ndarray:
    """Ids as typed on a command line, in the vocabulary's kind."""
    if self.is_text:
      return np.asarray(values, str)
    try:
      return np.asarray([int(v) for v in values], np.int64)
    except ValueError as e:
      raise ValueError(f"{what}: {e}") from e

  @classmethod
  def identity(cls, size: int) -> "ItemVocabulary":
    """Row r is item r: what an export from before dense ids indexed."""
    return cls(np.arange(size, dtype=np.int64))

  @property
  def size(self) -> int:
    """Rows of an item table: the items + padding."""
    return int(self.ids.size)

  @property
  def num_items(self) -> int:
    return self.size - 1

  def span(self) -> str:
    """'ids 1..3952' or "ids 'a-1'..'z-9'": what the vocabulary covers."""
    quote = "'" if self.is_text else ""
    return f"ids {quote}{self.ids[1]}{quote}..{quote}{self.ids[-1]}{quote}"

  def rows(self, ids, what: str = "item id") -> np.ndarray:
    """The dense rows of file ids; an unknown id is named."""
    ids = np.asarray(ids, self.ids.dtype if not self.is_text else str)
    rows = np.searchsorted(self.ids, ids)
    known = ((rows < self.size) & (self.ids[np.minimum(rows, self.size - 1)] == ids) &
             (ids != _padding(self.ids)))
    if not np.all(known):
      unknown = ids.ravel()[np.flatnonzero(~known.ravel())[0]]
      raise UnknownItemError(
          f"{what} {unknown} is not one of the {self.num_items} items the model "
          f"knows ({self.span()})")
    return rows.astype(np.int32)

  def ids_of_rows(self, rows) -> np.ndarray:
    """The file ids of dense rows."""
    return self.ids[np.asarray(rows, np.int64)]

  def digest(self) -> str:
    """A short fingerprint: run directories refuse data with other items."""
    return hashlib.sha256(self.ids.tobytes()).hexdigest()[:16]

  def describe(self) -> dict:
    return {"items": self.num_items, "item_ids_sha256": self.digest()}

  def __eq__(self, other) -> bool:
    return isinstance(other, ItemVocabulary) and np.array_equal(self.ids, other.ids)

  def save(self, directory: str) -> str:
    """Writes `directory/item_ids.npy` (atomically); returns its path."""
    path = os.path.join(directory, FILE)
    temporary = path + ".tmp.npy"
    np.save(temporary, self.ids)
    os.replace(temporary, path)
    return path


def load(directory: str, size_if_missing: Optional[int] = None) -> ItemVocabulary:
  """Reads `directory/item_ids.npy`; without one, the identity of
  `size_if_missing` rows if given (an export from before dense ids)."""
  path = os.path.join(directory, FILE)
  if os.path.isfile(path):
    ids = np.load(path)
    return ItemVocabulary(ids if ids.dtype.kind == "U" else ids.astype(np.int64))
  if size_if_missing is None:
    raise FileNotFoundError(f"{directory}: no {FILE} (the item ids of its rows)")
  return ItemVocabulary.identity(size_if_missing)
