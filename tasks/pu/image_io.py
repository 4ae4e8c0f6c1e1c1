"""Labeled image sets for the PU task: the embedded digits and files on disk.

- `digits`: scikit-learn's bundled `load_digits` (1,797 8x8 grey images, 10
  classes), shipped inside the installed package: nothing is downloaded.
- MNIST / Fashion-MNIST: the official IDX files (`train-images-idx3-ubyte`,
  `train-labels-idx1-ubyte`, `t10k-images-idx3-ubyte`, `t10k-labels-idx1-ubyte`,
  each plain or `.gz`) in one directory. A directory holding only the 10k test
  files is accepted: `load_image_set` then splits it (seeded) into train/test.
- CIFAR-10: the python batches (`data_batch_1` .. `data_batch_5`, `test_batch`,
  pickled dicts with `data` [n, 3072] uint8 and `labels`), or only some of them.
  Pickle runs code from the file: read only files you trust.

Every reader checks the magic number, the counts against the bytes present and
the labels against the images, and raises `ImageFormatError` naming the file.
Images come back as float32 in [0, 1] of shape [n, height, width, channels],
labels as int32.
"""

import dataclasses
import gzip
import os
import pickle
from typing import List, Optional, Tuple

import numpy as np

IDX_IMAGES_MAGIC = 0x00000803  # unsigned bytes, 3 dimensions
IDX_LABELS_MAGIC = 0x00000801  # unsigned bytes, 1 dimension
IDX_FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
             "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
CIFAR_TRAIN_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST_BATCH = "test_batch"
SOURCES = ("digits", "mnist", "fashion_mnist", "cifar10")


class ImageFormatError(ValueError):
  """A malformed or missing image / label file (the message names the file)."""


@dataclasses.dataclass
class ImageSet:
  """Images [n, h, w, c] float32 in [0, 1] and their int32 labels [n]."""
  images: np.ndarray
  labels: np.ndarray

  def __len__(self) -> int:
    return len(self.labels)

  def subset(self, rows: np.ndarray) -> "ImageSet":
    return ImageSet(self.images[rows], self.labels[rows])


def _read_bytes(path: str) -> bytes:
  opener = gzip.open if path.endswith(".gz") else open
  try:
    with opener(path, "rb") as f:
      return f.read()
  except (OSError, EOFError) as e:  # gzip.BadGzipFile is an OSError.
    raise ImageFormatError(f"{path}: cannot be read ({e})") from e


def read_idx(path: str, magic: int) -> np.ndarray:
  """One IDX file (plain or .gz) as a uint8 array of the shape its header gives."""
  data = _read_bytes(path)
  ndim = magic & 0xFF
  header = 4 + 4 * ndim
  if len(data) < header:
    raise ImageFormatError(f"{path}: truncated header ({len(data)} bytes)")
  found = int.from_bytes(data[:4], "big")
  if found != magic:
    raise ImageFormatError(f"{path}: magic number {found:#010x}, expected "
                           f"{magic:#010x} (an IDX {ndim}-d unsigned-byte file)")
  shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
  expected = int(np.prod(shape))
  if len(data) - header != expected:
    raise ImageFormatError(f"{path}: header says {shape} = {expected} bytes, the "
                           f"file holds {len(data) - header} (truncated or padded)")
  return np.frombuffer(data, np.uint8, offset=header).reshape(shape)


def write_idx(path: str, array: np.ndarray) -> None:
  """`array` (uint8 values) as an IDX file (gzip when `path` ends in .gz)."""
  magic = 0x800 | array.ndim
  data = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big")
                                             for d in array.shape)
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "wb") as f:
    f.write(data + array.astype(np.uint8).tobytes())


def write_mnist_shaped(directory: str, num_images: int, seed: int = 0) -> None:
  """Random 28x28 images with labels 0..9 in turn, as MNIST's IDX files: the
  two t10k files up to 10,000 images, beyond that also the train files with
  the rest (70,000: MNIST's 60,000 + 10,000). For timing at MNIST's shape only:
  there is nothing to learn in them."""
  rng = np.random.default_rng(seed)
  os.makedirs(directory, exist_ok=True)
  counts = {"test": min(num_images, 10_000), "train": max(num_images - 10_000, 0)}
  for split, count in counts.items():
    if count:
      images_name, labels_name = IDX_FILES[split]
      write_idx(os.path.join(directory, images_name),
                rng.integers(0, 256, (count, 28, 28), dtype=np.uint8))
      write_idx(os.path.join(directory, labels_name), np.arange(count) % 10)


def _find(directory: str, name: str) -> Optional[str]:
  for candidate in (name, name + ".gz"):
    path = os.path.join(directory, candidate)
    if os.path.exists(path):
      return path
  return None


def read_idx_pair(directory: str, split: str) -> Optional[ImageSet]:
  """The split's images and labels from `directory`, None when neither file is there."""
  names = IDX_FILES[split]
  paths = [_find(directory, name) for name in names]
  if paths == [None, None]:
    return None
  for name, path in zip(names, paths):
    if path is None:
      raise ImageFormatError(f"{os.path.join(directory, name)}[.gz]: missing (its "
                             f"{split} partner file is present)")
  images = read_idx(paths[0], IDX_IMAGES_MAGIC)
  labels = read_idx(paths[1], IDX_LABELS_MAGIC)
  if len(images) != len(labels):
    raise ImageFormatError(f"{paths[1]}: {len(labels)} labels for the {len(images)} "
                           f"images of {paths[0]}")
  return _image_set(images[..., None], labels, paths[1])


def _image_set(images: np.ndarray, labels: np.ndarray, labels_path: str) -> ImageSet:
  labels = np.asarray(labels, np.int64)
  if len(labels) and (labels.min() < 0 or labels.max() > 9):
    raise ImageFormatError(f"{labels_path}: labels must be 0..9, found "
                           f"{labels.min()}..{labels.max()}")
  return ImageSet(images.astype(np.float32) / 255.0, labels.astype(np.int32))


def read_cifar_batch(path: str) -> ImageSet:
  """One CIFAR-10 python batch: [n, 32, 32, 3] images and their labels."""
  try:
    with open(path, "rb") as f:
      batch = pickle.load(f, encoding="bytes")
  except OSError as e:
    raise ImageFormatError(f"{path}: cannot be read ({e})") from e
  except Exception as e:  # pylint: disable=broad-except  (any unpickling failure)
    raise ImageFormatError(f"{path}: not a CIFAR-10 python batch ({e!r})") from e
  if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
    raise ImageFormatError(f"{path}: not a CIFAR-10 python batch (a dict with "
                           f"b'data' and b'labels')")
  data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
  if data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != 3072:
    raise ImageFormatError(f"{path}: data must be uint8 [n, 3072], got "
                           f"{data.dtype} {list(data.shape)}")
  if len(labels) != len(data):
    raise ImageFormatError(f"{path}: {len(labels)} labels for {len(data)} images")
  images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
  return _image_set(images, labels, path)


def _concatenate(sets: List[ImageSet]) -> ImageSet:
  return ImageSet(np.concatenate([s.images for s in sets]),
                  np.concatenate([s.labels for s in sets]))


def read_cifar10(directory: str) -> Tuple[Optional[ImageSet], Optional[ImageSet]]:
  """(train, test) from the batches present in `directory` (None when absent)."""
  train = [read_cifar_batch(os.path.join(directory, name))
           for name in CIFAR_TRAIN_BATCHES
           if os.path.exists(os.path.join(directory, name))]
  test_path = os.path.join(directory, CIFAR_TEST_BATCH)
  test = read_cifar_batch(test_path) if os.path.exists(test_path) else None
  return (_concatenate(train) if train else None), test


def load_digits() -> ImageSet:
  """scikit-learn's bundled 8x8 digits (values 0..16), scaled to [0, 1]."""
  from sklearn import datasets  # pylint: disable=g-import-not-at-top
  digits = datasets.load_digits()
  return ImageSet((digits.images / 16.0).astype(np.float32)[..., None],
                  digits.target.astype(np.int32))


def split_seeded(data: ImageSet, test_fraction: float, seed: int,
                 flag: str = "pu_test_fraction") -> Tuple[ImageSet, ImageSet]:
  """A seeded random (rest, test) split, stratified by class."""
  if not 0 < test_fraction < 1:
    raise ValueError(f"--{flag} must be in (0, 1), got {test_fraction}")
  rng = np.random.default_rng([seed, 7])
  test_rows = []
  for label in np.unique(data.labels):
    rows = rng.permutation(np.flatnonzero(data.labels == label))
    test_rows.append(rows[:int(round(test_fraction * len(rows)))])
  test = np.sort(np.concatenate(test_rows))
  train = np.setdiff1d(np.arange(len(data)), test)
  return data.subset(train), data.subset(test)


def load_image_set(source: str, path: Optional[str], seed: int,
                   test_fraction: float = 0.2) -> Tuple[ImageSet, ImageSet]:
  """(train, test) of `source`. With only one split on disk, or for digits, the
  one split is divided (seeded, stratified) with `test_fraction` for test."""
  if source not in SOURCES:
    raise ValueError(f"--pu_data must be one of {', '.join(SOURCES)}, got '{source}'")
  if source == "digits":
    return split_seeded(load_digits(), test_fraction, seed)
  flag = "--cifar_path" if source == "cifar10" else "--mnist_path"
  if not path:
    raise ValueError(f"--pu_data={source} needs {flag} (a directory of the files)")
  if not os.path.isdir(path):
    raise ImageFormatError(f"{path}: not a directory ({flag})")
  if source == "cifar10":
    train, test = read_cifar10(path)
    wanted = ", ".join(CIFAR_TRAIN_BATCHES + (CIFAR_TEST_BATCH,))
  else:
    train, test = read_idx_pair(path, "train"), read_idx_pair(path, "test")
    wanted = ", ".join(IDX_FILES["train"] + IDX_FILES["test"]) + " (or .gz)"
  if train is None and test is None:
    raise ImageFormatError(f"{path}: none of {wanted} found ({flag})")
  if train is None or test is None:
    return split_seeded(train if train is not None else test, test_fraction, seed)
  return train, test
