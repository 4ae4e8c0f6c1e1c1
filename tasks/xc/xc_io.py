"""Reads and writes the Extreme Classification Repository text format.

The format (manikvarma.org/downloads/XC/XMLRepository.html): a header line
`num_points num_features num_labels`, then one line per point,
`l1,l2,... f:v f:v ...` with 0-based label and feature indices; a point may have
no label (the line starts with a space). Parsing is scikit-learn's svmlight
reader (fast, C); when it or a check fails, the file is parsed line by line in
Python, so that an error names the first bad line (and features given out of
order, which the fast reader refuses, are read). Nothing is returned on bad input.
"""

import dataclasses
import os
from typing import List, Tuple

import numpy as np
import scipy.sparse
from sklearn.datasets import load_svmlight_file


class XCFormatError(ValueError):
  """A malformed extreme-classification file (the message names file and line)."""


@dataclasses.dataclass
class XCData:
  """Points of one file: CSR features [n, num_features] and each point's labels."""
  features: scipy.sparse.csr_matrix
  labels: List[np.ndarray]
  num_labels: int

  @property
  def num_points(self) -> int:
    return self.features.shape[0]

  @property
  def num_features(self) -> int:
    return self.features.shape[1]


def _header(path: str, line: str) -> Tuple[int, int, int]:
  fields = line.split()
  if len(fields) != 3 or not all(f.isdigit() for f in fields):
    raise XCFormatError(f"{path}:1: expected the header 'num_points num_features "
                        f"num_labels', got {line.strip()[:80]!r}")
  points, features, labels = (int(f) for f in fields)
  if features < 1 or labels < 1:
    raise XCFormatError(f"{path}:1: num_features and num_labels must be >= 1, got "
                        f"{line.strip()!r}")
  return points, features, labels


def _parse_line(path: str, number: int, line: str, num_features: int,
                num_labels: int) -> Tuple[List[int], List[int], List[float]]:
  """(labels, feature ids, values) of `labels f:v ...`; XCFormatError names the line."""
  where = f"{path}:{number}"
  if not line.strip():
    raise XCFormatError(f"{where}: empty line")
  tokens = line.rstrip("\n").split(" ")
  label_token, feature_tokens = tokens[0], [t for t in tokens[1:] if t]
  if ":" in label_token:  # No label: the line began with a feature.
    label_token, feature_tokens = "", [label_token] + feature_tokens
  labels, ids, values = [], [], []
  for label in filter(None, label_token.split(",")):
    if not label.isdigit():
      raise XCFormatError(f"{where}: bad label {label!r} (expected a 0-based integer)")
    if int(label) >= num_labels:
      raise XCFormatError(f"{where}: label {label} is beyond the header's "
                          f"num_labels {num_labels}")
    labels.append(int(label))
  for token in feature_tokens:
    index, sep, value = token.partition(":")
    if not sep or not index.isdigit():
      raise XCFormatError(f"{where}: bad feature token {token!r} (expected index:value)")
    try:
      values.append(float(value))
    except ValueError:
      raise XCFormatError(f"{where}: bad feature value in {token!r}") from None
    if int(index) >= num_features:
      raise XCFormatError(f"{where}: feature {index} is beyond the header's "
                          f"num_features {num_features}")
    ids.append(int(index))
  return labels, ids, values


def _parse_in_python(path: str, num_points: int, num_features: int,
                     num_labels: int) -> XCData:
  """The slow path: every line checked, so an error names its line. It also
  reads what the fast reader refuses but the format allows (unsorted features)."""
  labels, rows, cols, values = [], [], [], []
  with open(path) as f:
    next(f)
    for number, line in enumerate(f, start=2):
      point_labels, ids, point_values = _parse_line(path, number, line, num_features,
                                                    num_labels)
      labels.append(np.asarray(point_labels, np.int64))
      rows += [len(labels) - 1] * len(ids)
      cols += ids
      values += point_values
  if len(labels) != num_points:
    raise XCFormatError(f"{path}: the header says {num_points} points, the body has "
                        f"{len(labels)} lines")
  features = scipy.sparse.csr_matrix(
      (np.asarray(values, np.float32), (rows, cols)), shape=(num_points, num_features))
  features.sum_duplicates()
  return XCData(features, labels, num_labels)


def read_xc_file(path: str) -> XCData:
  """The points of an XC-format file, checked against its header."""
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{path}: no such file (an extreme-classification "
                            "text file was expected)")
  with open(path, "rb") as f:
    header = f.readline()
    if not header.strip():
      raise XCFormatError(f"{path}:1: empty file (expected the header "
                          "'num_points num_features num_labels')")
    has_body = bool(f.read(1))
  num_points, num_features, num_labels = _header(path, header.decode("utf-8", "replace"))
  if not has_body:
    if num_points:
      raise XCFormatError(f"{path}: the header says {num_points} points, the file "
                          "has none")
    return XCData(scipy.sparse.csr_matrix((0, num_features), dtype=np.float32), [],
                  num_labels)
  try:
    # `offset` seeks to the header's newline, and the reader skips to the next line.
    features, labels = load_svmlight_file(
        path, n_features=num_features, dtype=np.float32, multilabel=True, zero_based=True,
        offset=len(header) - 1)
  except ValueError:
    return _parse_in_python(path, num_points, num_features, num_labels)
  all_labels = np.concatenate([np.asarray(p, np.float64) for p in labels] +
                              [np.zeros(0)])
  if features.shape[1] > num_features or np.any(
      (all_labels >= num_labels) | (all_labels < 0) | (all_labels != np.floor(all_labels))):
    return _parse_in_python(path, num_points, num_features, num_labels)
  if features.shape[0] != num_points:
    return _parse_in_python(path, num_points, num_features, num_labels)
  features = scipy.sparse.csr_matrix(
      (features.data, features.indices, features.indptr), shape=(num_points, num_features))
  return XCData(features, [np.asarray(point, np.int64) for point in labels], num_labels)


def write_xc_file(data: XCData, path: str) -> None:
  """Writes `data` in the XC text format (features in increasing order)."""
  features = data.features.tocsr()
  features.sort_indices()
  with open(path, "w") as f:
    f.write(f"{data.num_points} {data.num_features} {data.num_labels}\n")
    for row, labels in enumerate(data.labels):
      start, stop = features.indptr[row], features.indptr[row + 1]
      pairs = " ".join(f"{i}:{v:.6g}" for i, v in
                       zip(features.indices[start:stop], features.data[start:stop]))
      f.write(",".join(str(int(l)) for l in labels) + " " + pairs + "\n")


def read_train_test(train_path: str, test_path: str) -> Tuple[XCData, XCData]:
  """A train/test pair; the two headers must agree on features and labels."""
  train, test = read_xc_file(train_path), read_xc_file(test_path)
  if (train.num_features, train.num_labels) != (test.num_features, test.num_labels):
    raise XCFormatError(
        f"{test_path}:1: header has {test.num_features} features and {test.num_labels} "
        f"labels, but {train_path} has {train.num_features} and {train.num_labels}")
  return train, test

