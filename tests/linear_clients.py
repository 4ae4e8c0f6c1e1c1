"""A linear model y = x . w with mean squared error, and its clients: rounds
of FedAvg, FedSGD and DP-FedAvg computed by hand in the tests."""

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

W0 = np.array([0.5, -0.5], np.float32)
# (x, y) of two clients; a linear model y = x . w with mean squared error.
CLIENT_A = (np.array([[1.0, 0.0], [0.0, 1.0]], np.float32), np.array([1.0, 2.0], np.float32))
CLIENT_B = (np.array([[2.0, 1.0]], np.float32), np.array([0.0], np.float32))
CLIENT_NAN = (np.array([[np.nan, 1.0]], np.float32), np.array([1.0], np.float32))


def linear_model_fn():
  inputs = tf.keras.Input(shape=(2,))
  outputs = tf.keras.layers.Dense(
      1, use_bias=False, kernel_initializer=tf.keras.initializers.Constant(
          W0.reshape(2, 1)))(inputs)
  return tff.learning.models.from_keras_model(
      tf.keras.Model(inputs, tf.squeeze(outputs, axis=1)),
      loss=tf.keras.losses.MeanSquaredError(),
      input_spec=(tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None], tf.float32)))


def mse_gradient(w, client):
  x, y = client
  return 2.0 / len(y) * (x @ w - y) @ x


def dataset(client):
  return tf.data.Dataset.from_tensor_slices(client).batch(len(client[1]))
