"""Small image files in the official formats, written by tests: IDX (MNIST,
Fashion-MNIST; plain or .gz) and CIFAR-10 python batches."""

import gzip
import os
import pickle

import numpy as np

from tasks.pu import image_io


def write_idx(path: str, array: np.ndarray, magic: int = None, count: int = None) -> None:
  """An IDX file; `magic` and `count` break its header on purpose."""
  if magic is None and count is None:
    image_io.write_idx(path, array)
    return
  magic = magic if magic is not None else 0x800 | array.ndim
  shape = list(array.shape)
  if count is not None:
    shape[0] = count
  data = magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in shape)
  data += array.astype(np.uint8).tobytes()
  opener = gzip.open if path.endswith(".gz") else open
  with opener(path, "wb") as f:
    f.write(data)


def write_mnist(directory: str, split: str, n: int, seed: int = 0,
                suffix: str = "") -> tuple:
  rng = np.random.default_rng(seed)
  images = rng.integers(0, 256, (n, 28, 28))
  labels = np.arange(n) % 10
  names = image_io.IDX_FILES[split]
  write_idx(os.path.join(directory, names[0] + suffix), images)
  write_idx(os.path.join(directory, names[1] + suffix), labels)
  return images, labels


def write_cifar_batch(path: str, n: int, seed: int = 0, overrides=None) -> np.ndarray:
  rng = np.random.default_rng(seed)
  data = rng.integers(0, 256, (n, 3072)).astype(np.uint8)
  batch = {b"data": data, b"labels": [i % 10 for i in range(n)], **(overrides or {})}
  with open(path, "wb") as f:
    pickle.dump(batch, f)
  return data
