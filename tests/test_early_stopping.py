"""The stopping rule on hand-made validation curves, alone and inside Keras fit."""

import csv

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.training import centralized_loop
from fed_retrieval.training.early_stopping import StoppingRule

# Rises to 0.30 at round 20, then noise below it: with patience 3 the run
# stops at round 35 (25, 30, 35 came after the best) and reports round 20.
CURVE = [(5, 0.10), (10, 0.20), (15, 0.25), (20, 0.30), (25, 0.29), (30, 0.30),
         (35, 0.28), (40, 0.31), (45, 0.27)]


def stopping_round(rule, curve):
  for i in range(1, len(curve) + 1):
    if rule.should_stop(curve[:i]):
      return curve[i - 1][0]
  return None


def test_stops_after_patience_evaluations_without_improvement():
  rule = StoppingRule(patience=3)
  assert stopping_round(rule, CURVE) == 35
  assert rule.best(CURVE[:7]) == (20, 0.30)  # The tie at 30 keeps the earlier model.


def test_a_longer_patience_sees_the_later_improvement():
  rule = StoppingRule(patience=4)
  assert stopping_round(rule, CURVE) is None
  assert rule.best(CURVE) == (40, 0.31)


def test_min_delta_ignores_small_improvements():
  rule = StoppingRule(patience=3, min_delta=0.05)
  assert rule.best(CURVE) == (20, 0.30)  # 0.31 is not 5% better than 0.30.
  assert stopping_round(rule, CURVE) == 35


def test_smoothing_is_not_stopped_by_an_early_lucky_evaluation():
  # A lucky 0.30 at round 10 (noise), then a steady rise to 0.29-0.31.
  noisy = [(5, 0.10), (10, 0.30), (15, 0.18), (20, 0.22), (25, 0.24), (30, 0.26),
           (35, 0.28), (40, 0.29), (45, 0.31), (50, 0.30)]
  assert stopping_round(StoppingRule(patience=3), noisy) == 25  # Stopped by the spike.
  rule = StoppingRule(patience=3, smoothing=3)
  np.testing.assert_allclose([v for _, v in rule.smoothed(noisy)][:4],
                             [0.10, 0.20, 0.58 / 3, 0.70 / 3])
  assert stopping_round(rule, noisy) is None
  # Stopping reads the smoothed curve; the reported model is the best single one.
  assert rule.best(noisy) == (45, 0.31)
  assert stopping_round(rule, noisy + [(55, 0.26), (60, 0.25), (65, 0.24)]) == 65


def test_no_patience_never_stops():
  assert stopping_round(StoppingRule(patience=None), CURVE) is None
  assert not StoppingRule(patience=2).should_stop([])


@pytest.mark.parametrize("kwargs,message", [({"patience": 0}, "--patience must be >= 1"),
                                            ({"min_delta": -1}, "--min_delta"),
                                            ({"smoothing": 0}, "--smoothing")])
def test_bad_rules_name_the_flag(kwargs, message):
  with pytest.raises(ValueError, match=message):
    StoppingRule(**kwargs)


def test_keras_callback_stops_and_keeps_the_best_weights(tmp_path):
  """The callback evaluates after each Keras epoch (here: a hand-made curve
  indexed by the step), stops on the rule, and the best weights are saved."""
  model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
  model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
  values = dict(CURVE)
  weights_at = {}

  def evaluate(m):
    step = (len(weights_at) + 1) * 5
    weights_at[step] = m.get_weights()[0].copy()
    return {"global_recall@10": values[step]}

  metrics_path = str(tmp_path / "metrics.csv")
  callback = centralized_loop.ValidationAndStopping(
      evaluate, StoppingRule(patience=3), "val", "global_recall@10", steps_per_epoch=5,
      batch_size=4, best_path=str(tmp_path / "best" / "weights"),
      metrics_path=metrics_path, label="test", epochs=9, output_dir=str(tmp_path))
  data = tf.data.Dataset.from_tensor_slices(
      (np.ones((20, 2), np.float32), np.zeros((20, 1), np.float32))).batch(4).repeat()
  model.fit(data, epochs=9, steps_per_epoch=5, verbose=0,
            callbacks=[callback])
  assert [step for step, _ in callback.curve] == [5, 10, 15, 20, 25, 30, 35]
  model.load_weights(str(tmp_path / "best" / "weights"))
  np.testing.assert_array_equal(model.get_weights()[0], weights_at[20])
  with open(metrics_path) as f:
    rows = list(csv.DictReader(f))
  assert [float(r["val_global_recall@10"]) for r in rows] == [v for _, v in CURVE[:7]]
  assert [int(r["examples_seen"]) for r in rows] == [20 * (i + 1) for i in range(7)]
  # A resumed run (Keras epoch 4 onwards) reads the earlier curve back.
  resumed = centralized_loop.ValidationAndStopping(
      evaluate, StoppingRule(patience=3), "val", "global_recall@10", 5, 4,
      str(tmp_path / "b"), metrics_path, "test", 9, str(tmp_path))
  resumed.on_epoch_begin(4)
  assert resumed.curve == CURVE[:4]
