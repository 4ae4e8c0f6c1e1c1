"""The XC text-format reader on small files the tests write."""

import os

import numpy as np
import pytest

from tasks.xc import xc_io
from tasks.xc.xc_io import XCFormatError

GOOD = "3 5 4\n0,2 1:0.5 3:1.0\n 0:2.0\n3 4:1.5\n"


def write(tmp_path, text: str, name: str = "data.txt") -> str:
  path = os.path.join(tmp_path, name)
  with open(path, "w") as f:
    f.write(text)
  return path


def test_reads_labels_features_and_a_point_without_labels(tmp_path):
  data = xc_io.read_xc_file(write(tmp_path, GOOD))
  assert (data.num_points, data.num_features, data.num_labels) == (3, 5, 4)
  np.testing.assert_allclose(data.features.toarray(),
                             [[0, 0.5, 0, 1.0, 0], [2.0, 0, 0, 0, 0], [0, 0, 0, 0, 1.5]])
  assert [list(l) for l in data.labels] == [[0, 2], [], [3]]


def test_write_then_read_gives_the_same_points(tmp_path):
  data = xc_io.read_xc_file(write(tmp_path, GOOD))
  path = os.path.join(tmp_path, "again.txt")
  xc_io.write_xc_file(data, path)
  again = xc_io.read_xc_file(path)
  np.testing.assert_allclose(again.features.toarray(), data.features.toarray())
  assert [list(l) for l in again.labels] == [list(l) for l in data.labels]


@pytest.mark.parametrize("text, where, says", [
    ("3 5 4\n0,2 1:0.5 3:1.0\n 0:2.0\n3 9:1.5\n", ":4:", "feature 9 is beyond"),
    ("3 5 4\n0,7 1:0.5\n 0:2.0\n3 4:1.5\n", ":2:", "label 7 is beyond"),
    ("3 5 4\n0,2 1:0.5 3:x\n 0:2.0\n3 4:1.5\n", ":2:", "bad feature value"),
    ("3 5 4\n0,a 1:0.5\n 0:2.0\n3 4:1.5\n", ":2:", "bad label 'a'"),
    ("3 5 4\n0 1:0.5\n 0:2.0\n3 4\n", ":4:", "bad feature token '4'"),
    ("4 5 4\n0,2 1:0.5 3:1.0\n 0:2.0\n3 4:1.5\n", ": ", "header says 4 points, the body has 3"),
    ("", ":1:", "empty file"),
    ("3 5\n0 1:1\n", ":1:", "expected the header"),
])
def test_bad_input_names_the_file_and_line(tmp_path, text, where, says):
  path = write(tmp_path, text)
  with pytest.raises(XCFormatError) as error:
    xc_io.read_xc_file(path)
  assert str(error.value).startswith(path + where.rstrip(" ")), str(error.value)
  assert says in str(error.value)


def test_train_and_test_headers_must_agree(tmp_path):
  train = write(tmp_path, GOOD, "train.txt")
  test = write(tmp_path, "1 6 4\n0 5:1\n", "test.txt")
  with pytest.raises(XCFormatError, match="test.txt:1: header has 6 features"):
    xc_io.read_train_test(train, test)


def test_missing_file_is_named(tmp_path):
  with pytest.raises(FileNotFoundError, match="nothere.txt: no such file"):
    xc_io.read_xc_file(os.path.join(tmp_path, "nothere.txt"))


def test_features_out_of_order_are_read(tmp_path):
  data = xc_io.read_xc_file(write(tmp_path, "2 5 4\n1 3:1.0 0:0.5\n2 4:2.0 1:1.0\n"))
  np.testing.assert_allclose(data.features.toarray(),
                             [[0.5, 0, 0, 1.0, 0], [0, 1.0, 0, 0, 2.0]])
