"""A small convolutional classifier for the PU image task (configurable).

Per entry of `conv_filters`: a 3x3 same-padded ReLU convolution and, while the
feature map is at least 4 pixels wide, a 2x2 max-pool; then a ReLU dense layer
of `dense_units` and a linear layer of `num_classes` logits. The default
(32, 64 filters, 128 units) is the usual MNIST federated CNN at half width.
"""

import dataclasses
from typing import List, Tuple

import numpy as np
import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class ImageClassifierConfig:
  input_shape: Tuple[int, int, int]
  num_classes: int
  conv_filters: Tuple[int, ...] = (32, 64)
  dense_units: int = 128

  def __post_init__(self):
    if self.num_classes < 2:
      raise ValueError(f"a classifier needs >= 2 classes, got {self.num_classes}")
    if any(f < 1 for f in self.conv_filters) or self.dense_units < 1:
      raise ValueError(f"--conv_filters and --dense_units must be >= 1, got "
                       f"{list(self.conv_filters)} and {self.dense_units}")

  def pooled_layers(self) -> List[bool]:
    """Per convolution: whether a 2x2 max-pool follows it."""
    width, pooled = self.input_shape[1], []
    for _ in self.conv_filters:
      pooled.append(width >= 4)
      width = width // 2 if width >= 4 else width
    return pooled

  def weight_shapes(self) -> List[Tuple[int, ...]]:
    """Shapes of the trainable weights, in Keras order."""
    height, width, channels = self.input_shape
    shapes = []
    for filters, pooled in zip(self.conv_filters, self.pooled_layers()):
      shapes += [(3, 3, channels, filters), (filters,)]
      channels = filters
      if pooled:
        height, width = height // 2, width // 2
    flat = height * width * channels
    return shapes + [(flat, self.dense_units), (self.dense_units,),
                     (self.dense_units, self.num_classes), (self.num_classes,)]


def build_image_classifier(config: ImageClassifierConfig,
                           seed: int = 0) -> tf.keras.Model:
  """Images [B, H, W, C] -> logits [B, num_classes]; weights seeded."""
  initializer = lambda i: tf.keras.initializers.GlorotUniform(seed=seed * 100 + i)
  inputs = tf.keras.Input(config.input_shape, name="images")
  x = inputs
  for i, (filters, pooled) in enumerate(zip(config.conv_filters, config.pooled_layers())):
    x = tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu",
                               kernel_initializer=initializer(i))(x)
    if pooled:
      x = tf.keras.layers.MaxPool2D()(x)
  x = tf.keras.layers.Flatten()(x)
  x = tf.keras.layers.Dense(config.dense_units, activation="relu",
                            kernel_initializer=initializer(50))(x)
  logits = tf.keras.layers.Dense(config.num_classes, name="logits",
                                 kernel_initializer=initializer(51))(x)
  return tf.keras.Model(inputs, logits, name="image_classifier")


def correct(model: tf.keras.Model, images: np.ndarray, labels: np.ndarray,
            batch_size: int = 1024) -> np.ndarray:
  """Whether the model's top-1 class is each image's label [N]."""
  predicted = np.concatenate([
      np.argmax(model(images[i:i + batch_size], training=False).numpy(), axis=1)
      for i in range(0, len(images), batch_size)])
  return predicted == labels
