"""The ratings reader on small ML-1M and ML-20M style files, and its errors."""

import os

import numpy as np
import pytest

from tasks.movielens import ratings_io
from tasks.movielens.ratings_io import RatingsFormatError


def write(tmp_path, name: str, text: str) -> str:
  path = os.path.join(tmp_path, name)
  with open(path, "w") as f:
    f.write(text)
  return path


def test_reads_ml1m_dat(tmp_path):
  path = write(tmp_path, "ratings.dat",
               "1::1193::5::978300760\n1::661::3::978302109\n2::3408::4::978300275\n")
  ratings = ratings_io.read_ratings(path)
  assert list(ratings.columns) == list(ratings_io.RATINGS_COLUMNS)
  np.testing.assert_array_equal(ratings["user_id"], [1, 1, 2])
  np.testing.assert_array_equal(ratings["item_id"], [1193, 661, 3408])
  np.testing.assert_array_equal(ratings["rating"], [5.0, 3.0, 4.0])
  np.testing.assert_array_equal(ratings["timestamp"],
                                [978300760, 978302109, 978300275])


def test_reads_ml20m_csv_with_half_star_ratings(tmp_path):
  path = write(tmp_path, "ratings.csv",
               "userId,movieId,rating,timestamp\n1,2,3.5,1112486027\n"
               "1,29,3.5,1112484676\n7,32,4.0,0\n")
  ratings = ratings_io.read_ratings(path)
  np.testing.assert_array_equal(ratings["user_id"], [1, 1, 7])
  np.testing.assert_array_equal(ratings["item_id"], [2, 29, 32])
  np.testing.assert_allclose(ratings["rating"], [3.5, 3.5, 4.0])
  np.testing.assert_array_equal(ratings["timestamp"], [1112486027, 1112484676, 0])


def test_write_then_read_round_trip(tmp_path):
  path = os.path.join(tmp_path, "ratings.dat")
  original = ratings_io.read_ratings(write(tmp_path, "in.dat",
                                           "3::5::2::10\n3::6::1::11\n"))
  ratings_io.write_ratings_dat(original, path)
  assert ratings_io.read_ratings(path).equals(original)


@pytest.mark.parametrize("name,text,message", [
    ("ratings.dat", "1::2::3::4\n1::2::3\n", r"ratings.dat:2: expected 4 fields"),
    ("ratings.dat", "1::2::3::4\n1::2::3::4::5\n", r"ratings.dat:2: expected 4 fields"),
    ("ratings.dat", "1::2::3::4\n\n1::2::3::4\n", r"ratings.dat:2: expected 4 fields"),
    ("ratings.dat", "1::2::3::4\nx::2::3::4\n", r"ratings.dat:2: user_id 'x' is not"),
    ("ratings.dat", "1::2.5::3::4\n", r"ratings.dat:1: item_id '2.5' is not"),
    ("ratings.dat", "1::2::3::4\n1::3::3::-5\n", r"ratings.dat:2: negative timestamp"),
    ("ratings.dat", "1::0::3::4\n", r"ratings.dat:1: item_id 0 is reserved"),
    ("ratings.dat", "1::2::three::4\n", r"ratings.dat:1: rating 'three'"),
    ("ratings.dat", "", r"ratings.dat: contains no ratings"),
    ("ratings.csv", "userId,movieId,rating,timestamp\n", r"ratings.csv: contains no"),
    ("ratings.csv", "user,movie,rating,time\n1,2,3,4\n", r"ratings.csv:1: expected the header"),
    ("ratings.csv", "userId,movieId,rating,timestamp\n1,2,3,4\n1,2,3\n",
     r"ratings.csv:3: expected 4 fields"),
    ("ratings.txt", "1::2::3::4\n", r"ratings.txt: unknown ratings format"),
])
def test_bad_input_names_file_and_line(tmp_path, name, text, message):
  path = write(tmp_path, name, text)
  with pytest.raises(RatingsFormatError, match=message):
    ratings_io.read_ratings(path)


def test_missing_file(tmp_path):
  with pytest.raises(RatingsFormatError, match="no such ratings file"):
    ratings_io.read_ratings(os.path.join(tmp_path, "absent", "ratings.dat"))
