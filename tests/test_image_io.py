"""The PU task's readers on small files written here: IDX (plain, .gz),
CIFAR-10 python batches; every bad kind names its file."""

import os

import numpy as np
import pytest

from tasks.pu import image_io
from tests.image_files import write_cifar_batch
from tests.image_files import write_idx
from tests.image_files import write_mnist


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_mnist_round_trip(tmp_path, suffix):
  images, labels = write_mnist(str(tmp_path), "train", 30, suffix=suffix)
  write_mnist(str(tmp_path), "test", 20, seed=1, suffix=suffix)
  train, test = image_io.load_image_set("mnist", str(tmp_path), seed=0)
  assert train.images.shape == (30, 28, 28, 1) and len(test) == 20
  np.testing.assert_allclose(train.images[..., 0], images / 255.0, rtol=1e-6)
  np.testing.assert_array_equal(train.labels, labels)


def test_only_test_files_are_split_seeded_and_stratified(tmp_path):
  write_mnist(str(tmp_path), "test", 100)
  train, test = image_io.load_image_set("fashion_mnist", str(tmp_path), seed=4)
  assert (len(train), len(test)) == (80, 20)
  np.testing.assert_array_equal(np.bincount(test.labels), [2] * 10)
  again, _ = image_io.load_image_set("fashion_mnist", str(tmp_path), seed=4)
  np.testing.assert_array_equal(again.images, train.images)


@pytest.mark.parametrize("damage,match", [
    ("magic", "magic number 0x00000802"), ("truncated", "truncated or padded"),
    ("count", "60 labels for the 50 images"), ("header", "truncated header"),
    ("gzip", "cannot be read")])
def test_bad_idx_files_name_the_file(tmp_path, damage, match):
  write_mnist(str(tmp_path), "test", 50)
  images_path = os.path.join(str(tmp_path), "t10k-images-idx3-ubyte")
  labels_path = os.path.join(str(tmp_path), "t10k-labels-idx1-ubyte")
  if damage == "magic":
    write_idx(images_path, np.zeros((50, 28, 28)), magic=0x802)
  elif damage == "truncated":
    with open(images_path, "r+b") as f:
      f.truncate(1000)
  elif damage == "count":
    write_idx(labels_path, np.arange(60) % 10)
  elif damage == "header":
    with open(labels_path, "wb") as f:
      f.write(b"\x00\x00")
  else:
    os.remove(images_path)
    with open(images_path + ".gz", "wb") as f:
      f.write(b"not gzip at all")
  with pytest.raises(image_io.ImageFormatError, match=match) as error:
    image_io.load_image_set("mnist", str(tmp_path), seed=0)
  assert "t10k-" in str(error.value)


def test_missing_partner_and_empty_directory(tmp_path):
  with pytest.raises(image_io.ImageFormatError, match="none of"):
    image_io.load_image_set("mnist", str(tmp_path), seed=0)
  write_mnist(str(tmp_path), "train", 10)
  os.remove(os.path.join(str(tmp_path), "train-labels-idx1-ubyte"))
  with pytest.raises(image_io.ImageFormatError, match="train-labels-idx1-ubyte.*missing"):
    image_io.load_image_set("mnist", str(tmp_path), seed=0)
  with pytest.raises(ValueError, match="--mnist_path"):
    image_io.load_image_set("mnist", None, seed=0)


def test_cifar_batches(tmp_path):
  first = write_cifar_batch(str(tmp_path / "data_batch_1"), 10)
  write_cifar_batch(str(tmp_path / "data_batch_2"), 10, seed=1)
  write_cifar_batch(str(tmp_path / "test_batch"), 10, seed=2)
  train, test = image_io.load_image_set("cifar10", str(tmp_path), seed=0)
  assert train.images.shape == (20, 32, 32, 3) and len(test) == 10
  # Channel-major rows: pixel (0, 1) of image 0 is data[1], data[1025], data[2049].
  np.testing.assert_allclose(train.images[0, 0, 1] * 255, first[0, [1, 1025, 2049]],
                             rtol=1e-5)


@pytest.mark.parametrize("overrides,match", [
    ({b"labels": [0] * 3}, "3 labels for 10 images"),
    ({b"data": np.zeros((10, 100), np.uint8)}, r"uint8 \[n, 3072\]"),
    ({b"labels": [12] * 10}, "labels must be 0..9")])
def test_bad_cifar_batches_name_the_file(tmp_path, overrides, match):
  write_cifar_batch(str(tmp_path / "test_batch"), 10, overrides=overrides)
  with pytest.raises(image_io.ImageFormatError, match=match) as error:
    image_io.load_image_set("cifar10", str(tmp_path), seed=0)
  assert "test_batch" in str(error.value)


def test_a_non_pickle_cifar_file(tmp_path):
  (tmp_path / "data_batch_1").write_bytes(b"\x00garbage")
  with pytest.raises(image_io.ImageFormatError, match="data_batch_1: not a CIFAR-10"):
    image_io.load_image_set("cifar10", str(tmp_path), seed=0)


def test_digits_default():
  train, test = image_io.load_image_set("digits", None, seed=0)
  assert len(train) + len(test) == 1797 and train.images.shape[1:] == (8, 8, 1)
  assert 0 <= train.images.min() and train.images.max() <= 1


@pytest.mark.parametrize("num_images,splits", [(30, {"test": 30}),
                                               (10_050, {"test": 10_000, "train": 50})])
def test_mnist_shaped_files_read_back_as_mnist(tmp_path, num_images, splits):
  image_io.write_mnist_shaped(str(tmp_path), num_images, seed=3)
  for split, count in splits.items():
    images = image_io.read_idx_pair(str(tmp_path), split)
    assert images.images.shape == (count, 28, 28, 1)
    assert list(images.labels[:12]) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
  assert (image_io.read_idx_pair(str(tmp_path), "train") is None) == ("train" not in splits)
