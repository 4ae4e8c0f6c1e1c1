"""Which Keras optimizers step in place (`optimizers.keras_steps_in_place`)."""

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
