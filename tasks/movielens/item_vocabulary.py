"""Dense item ids: the movies a ratings file holds, numbered 1..N (0 is padding).

MovieLens ids are sparse (ml-latest-small: 9,724 movies with ids up to
193,609), and a table indexed by the raw id would be ~20x larger than the data.
Every model, example and export uses the dense row instead; `ItemVocabulary`
maps between the two and travels with prepared data, run directories and
exports as `item_ids.npy` (row r holds the file's movie id of row r), so the
scripts still speak the file's own ids.
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


@dataclasses.dataclass(frozen=True, eq=False)
class ItemVocabulary:
  """`movie_ids[row]` is the file's id of dense row `row`; row 0 is padding."""
  movie_ids: np.ndarray  # int64 [size], strictly increasing after row 0.

  def __post_init__(self):
    ids = self.movie_ids
    if ids.ndim != 1 or ids.size < 2 or ids[0] != PADDING_ID:
      raise ValueError("an item vocabulary is [0, id_1, ..., id_n] with n >= 1, "
                       f"got {ids[:5].tolist()}... of shape {ids.shape}")
    if np.any(np.diff(ids[1:]) <= 0) or ids[1] <= PADDING_ID:
      raise ValueError("the movie ids of an item vocabulary must be positive and "
                       "strictly increasing")

  @classmethod
  def of_items(cls, movie_ids: Sequence[int]) -> "ItemVocabulary":
    """The vocabulary of the distinct ids given (in ascending id order)."""
    distinct = np.unique(np.asarray(movie_ids, np.int64))
    return cls(np.concatenate([[PADDING_ID], distinct]).astype(np.int64))

  @classmethod
  def identity(cls, size: int) -> "ItemVocabulary":
    """Row r is movie r: what an export from before dense ids indexed."""
    return cls(np.arange(size, dtype=np.int64))

  @property
  def size(self) -> int:
    """Rows of an item table: the movies + padding."""
    return int(self.movie_ids.size)

  @property
  def num_items(self) -> int:
    return self.size - 1

  def rows(self, movie_ids, what: str = "movie id") -> np.ndarray:
    """The dense rows of file movie ids; an unknown id is named."""
    movie_ids = np.asarray(movie_ids, np.int64)
    rows = np.searchsorted(self.movie_ids, movie_ids)
    known = (rows < self.size) & (self.movie_ids[np.minimum(rows, self.size - 1)]
                                  == movie_ids) & (movie_ids != PADDING_ID)
    if not np.all(known):
      unknown = int(np.asarray(movie_ids).ravel()[np.flatnonzero(~known.ravel())[0]])
      raise UnknownItemError(
          f"{what} {unknown} is not one of the {self.num_items} movies the model "
          f"knows (ids {int(self.movie_ids[1])}..{int(self.movie_ids[-1])})")
    return rows.astype(np.int32)

  def ids_of_rows(self, rows) -> np.ndarray:
    """The file movie ids of dense rows."""
    return self.movie_ids[np.asarray(rows, np.int64)]

  def digest(self) -> str:
    """A short fingerprint: run directories refuse data with other items."""
    return hashlib.sha256(self.movie_ids.tobytes()).hexdigest()[:16]

  def describe(self) -> dict:
    return {"items": self.num_items, "item_ids_sha256": self.digest()}

  def __eq__(self, other) -> bool:
    return (isinstance(other, ItemVocabulary) and
            np.array_equal(self.movie_ids, other.movie_ids))

  def save(self, directory: str) -> str:
    """Writes `directory/item_ids.npy` (atomically); returns its path."""
    path = os.path.join(directory, FILE)
    temporary = path + ".tmp.npy"
    np.save(temporary, self.movie_ids)
    os.replace(temporary, path)
    return path


def load(directory: str, size_if_missing: Optional[int] = None) -> ItemVocabulary:
  """Reads `directory/item_ids.npy`; without one, the identity of
  `size_if_missing` rows if given (an export from before dense ids)."""
  path = os.path.join(directory, FILE)
  if os.path.isfile(path):
    return ItemVocabulary(np.load(path).astype(np.int64))
  if size_if_missing is None:
    raise FileNotFoundError(f"{directory}: no {FILE} (the item ids of its rows)")
  return ItemVocabulary.identity(size_if_missing)
