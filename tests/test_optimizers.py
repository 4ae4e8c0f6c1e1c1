"""Which Keras optimizers step in place (`optimizers.keras_steps_in_place`);
a server optimizer that steps only the rows an update touches."""

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.algorithms import optimizers

SGD = tf.keras.optimizers.SGD


@pytest.mark.parametrize("optimizer, in_place", [
    (lambda: SGD(0.1), True),
    (lambda: optimizers.keras_optimizer("sgd", 0.1), True),
    (lambda: optimizers.keras_optimizer("sgdm", 0.1), False),
    (lambda: SGD(0.1, weight_decay=0.01), False),
    (lambda: SGD(0.1, clipnorm=1.0), False),
    (lambda: SGD(0.1, clipvalue=1.0), False),
    (lambda: SGD(0.1, global_clipnorm=1.0), False),
    (lambda: SGD(0.1, use_ema=True), False),
    (lambda: SGD(tf.keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)), False),
    (lambda: optimizers.keras_optimizer("adam", 0.1), False),
    (lambda: optimizers.keras_optimizer("adagrad", 0.1), False),
])
def test_only_plain_sgd_at_a_constant_rate_steps_in_place(optimizer, in_place):
  assert optimizers.keras_steps_in_place(optimizer()) == in_place


def _adam_by_hand(steps, rate=0.1, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
  """A weight from 0 after Adam's steps on `steps`, (t, update) pairs (NumPy):
  the bias correction counts every step, those that skipped the weight too."""
  w, m, v = 0.0, 0.0, 0.0
  for t, g in steps:
    m = beta_1 * m + (1 - beta_1) * g
    v = beta_2 * v + (1 - beta_2) * g * g
    w -= rate * np.sqrt(1 - beta_2 ** t) / (1 - beta_1 ** t) * m / (np.sqrt(v) + epsilon)
  return w


@pytest.mark.parametrize("name", ["adam", "sgdm", "adagrad"])
def test_touched_rows_only_keeps_untouched_rows_and_their_statistics(name):
  """A table of 3 rows (and a bias vector): row 1 touched at steps 1 and 3,
  row 2 never, row 0 every step. Untouched rows keep weight and statistics;
  every touched row moves as the plain optimizer would move it on its own
  updates (Adam checked by hand; row 0 equals the plain optimizer's row)."""
  table = np.zeros((3, 2), np.float32)
  bias = np.zeros(3, np.float32)
  updates = [np.array([[1, 2], [0.5, 0], [0, 0]], np.float32),
             np.array([[-1, 1], [0, 0], [0, 0]], np.float32),
             np.array([[2, 0], [1, -1], [0, 0]], np.float32)]
  lazy = optimizers.touched_rows_only(optimizers.tff_optimizer(name, 0.1, "server_optimizer"))
  plain = optimizers.tff_optimizer(name, 0.1, "server_optimizer")
  specs = [tf.TensorSpec(table.shape, tf.float32), tf.TensorSpec(bias.shape, tf.float32)]
  lazy_state, plain_state = lazy.initialize(specs), plain.initialize(specs)
  lazy_weights = plain_weights = [tf.constant(table), tf.constant(bias)]
  for update in updates:
    gradients = [tf.constant(update), tf.constant(update[:, 0])]
    lazy_state, lazy_weights = lazy.next(lazy_state, lazy_weights, gradients)
    plain_state, plain_weights = plain.next(plain_state, plain_weights, gradients)
  lazy_table, lazy_bias = (np.asarray(w) for w in lazy_weights)
  plain_table = np.asarray(plain_weights[0])
  np.testing.assert_allclose(lazy_table[0], plain_table[0], rtol=1e-6)
  np.testing.assert_array_equal(lazy_table[2], 0)
  np.testing.assert_array_equal(lazy_bias[2], 0)
  # Momentum moved row 1 at step 2 in the plain optimizer; Adagrad steps
  # nothing on a zero update, so there the two agree.
  assert np.allclose(lazy_table[1], plain_table[1]) == (name == "adagrad")
  initial = lazy.initialize(specs)
  for key, value in lazy_state.items():
    if isinstance(value, list):  # Per-weight statistics: row 2's as initialized.
      np.testing.assert_array_equal(np.asarray(value[0])[2],
                                    np.asarray(initial[key][0])[2], err_msg=key)
  if name == "adam":
    row_1 = [_adam_by_hand([(1, 0.5), (3, 1)]), _adam_by_hand([(1, 0), (3, -1)])]
    np.testing.assert_allclose(lazy_table[1], row_1, rtol=1e-5)
    np.testing.assert_allclose(lazy_bias[1], row_1[0], rtol=1e-5)
