"""The stopping rule on hand-made validation curves, alone, in `ValidationCurve`
and inside Keras fit."""

import csv
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.evaluation import units
from fed_retrieval.training import centralized_loop
from fed_retrieval.training import validation_curve
from fed_retrieval.training.early_stopping import Evaluation
from fed_retrieval.training.early_stopping import StoppingRule

# Rises to 0.30 at round 20, then noise within a point of it: 100 validation
# points, the first round(100 v) of them hit (so two evaluations differ on
# the points in between).
VALUES = [(5, 0.10), (10, 0.20), (15, 0.25), (20, 0.30), (25, 0.29), (30, 0.30),
          (35, 0.28), (40, 0.31), (45, 0.27), (50, 0.29), (55, 0.28), (60, 0.26)]


def first_hits(value, points=100):
  return units.per_point(np.arange(points) < round(value * points))


def curve_of(rule, values):
  """The curve the rule builds from `values` (first_hits units)."""
  curve, best = [], None
  for step, value in values:
    new = first_hits(value)
    improved = rule.improves(new, best)
    best = new if improved else best
    curve.append(Evaluation(step, value, improved))
  return curve


def stopping_step(rule, curve):
  for i in range(1, len(curve) + 1):
    if rule.should_stop(curve[:i]):
      return curve[i - 1].step
  return None


def test_improvement_is_measured_against_the_paired_standard_error():
  best = units.per_point([1, 0, 1, 0, 1, 0, 0, 0])
  new = units.per_point([1, 1, 1, 0, 1, 1, 0, 0])
  gain, error = units.paired_gain(new, best)
  difference = np.array([0, 1, 0, 0, 0, 1, 0, 0], float)
  assert gain == pytest.approx(difference.mean())
  assert error == pytest.approx(difference.std(ddof=1) / np.sqrt(8))
  assert StoppingRule(min_improvement_se=1.0).improves(new, best)  # 0.25 > 0.164
  assert not StoppingRule(min_improvement_se=2.0).improves(new, best)  # 0.25 < 0.327
  assert not StoppingRule(min_improvement_se=0.0).improves(best, best)  # No gain.


def test_users_are_the_units_of_a_recall_over_their_examples():
  hits = np.array([1, 0, 0, 1, 1, 1, 0, 0, 0, 1], float)
  users = np.array([7, 7, 7, 3, 3, 9, 9, 9, 9, 9])
  per_user = units.per_group(hits, users)
  np.testing.assert_array_equal(per_user.numerators, [2, 1, 2])  # Users 3, 7, 9.
  np.testing.assert_array_equal(per_user.weights, [2, 3, 5])
  assert per_user.value == pytest.approx(0.5)
  residuals = per_user.numerators - 0.5 * per_user.weights
  assert per_user.standard_error() == pytest.approx(
      np.sqrt(3 / 2 * np.sum(residuals ** 2)) / 10)
  with pytest.raises(ValueError, match="different validation units"):
    units.paired_gain(per_user, units.per_point(hits))


def test_stops_patience_evaluations_after_the_best_beyond_noise():
  rule = StoppingRule(patience=4, min_improvement_se=1.5)
  curve = curve_of(rule, VALUES)
  # 0.31 at round 40 is a record but a single standard error (0.01) above
  # 0.30: the best stays round 20, and no stop fires at the record itself.
  assert [e.improved for e in curve[:8]] == [True, True, True, True, False, False,
                                             False, False]
  assert rule.best(curve).step == 20
  assert stopping_step(rule, curve) == 45
  assert not rule.should_stop(curve[:8])  # Patience is over, but 40 is a record.


def test_the_maximum_is_reported_and_the_stop_is_the_last_gains():
  # Round 40's 0.31 is within the noise of round 20's 0.30: no gain, so
  # patience counts from round 20 under both rules, but it is the maximum.
  gains, maximum = (StoppingRule(patience=4, min_improvement_se=1.5, report_model=r)
                    for r in ("last_gain", "maximum"))
  curve = curve_of(gains, VALUES)
  assert curve_of(maximum, VALUES) == curve
  assert (gains.best(curve).step, maximum.best(curve).step) == (20, 40)
  assert stopping_step(maximum, curve) == stopping_step(gains, curve) == 45
  # Of equal values the first is reported (30 ties 20 at 0.30).
  assert maximum.best(curve[:6]).step == 20


def test_a_jump_after_a_dip_is_a_new_best_not_a_stop():
  # The FedAwS curve on Delicious that the trailing means stopped at its jump.
  rule = StoppingRule(patience=4, smoothing=3)
  curve = curve_of(rule, [(5, 0.441), (10, 0.391), (15, 0.385), (20, 0.389),
                          (25, 0.487)])
  assert curve[-1].improved and rule.best(curve).step == 25
  assert not rule.should_stop(curve)
  oracle = curve_of(rule, [(5, 0.314), (10, 0.171), (15, 0.262), (20, 0.262),
                           (25, 0.366), (30, 0.30)])
  assert rule.best(oracle).step == 25 and not rule.should_stop(oracle)


def test_smoothing_delays_a_stop_and_never_causes_one():
  values = VALUES[:4] + [(25, 0.22), (30, 0.23), (35, 0.27), (40, 0.29), (45, 0.28),
                         (50, 0.26), (55, 0.26), (60, 0.25)]
  raw, smoothed = StoppingRule(patience=3), StoppingRule(patience=3, smoothing=3)
  assert stopping_step(raw, curve_of(raw, values)) == 35
  # The trailing mean of 3 peaks at round 45 (0.28): three evaluations later.
  assert stopping_step(smoothed, curve_of(smoothed, values)) == 60
  for rule in (raw, smoothed):
    assert rule.best(curve_of(rule, values)).step == 20


def test_no_patience_never_stops():
  rule = StoppingRule(patience=None)
  assert stopping_step(rule, curve_of(rule, VALUES)) is None
  assert not StoppingRule(patience=2).should_stop([])


@pytest.mark.parametrize("seed", range(20))
def test_a_stopped_run_never_reports_its_last_evaluation(seed, tmp_path):
  """Noisy curves of 300 validation points (a latent P@1 that rises, then
  plateaus or decays): wherever a run stops before its cap, the last gain
  lies `patience` evaluations back; reporting the maximum instead moves
  neither a gain nor the stop."""
  rng = np.random.default_rng(seed)
  model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,))])
  rule = StoppingRule(patience=int(rng.integers(1, 6)), smoothing=int(rng.integers(1, 4)))
  curve = validation_curve.ValidationCurve(rule, str(tmp_path / "gain"), [], min_step=10)
  maximum = validation_curve.ValidationCurve(
      dataclasses.replace(rule, report_model="maximum"), str(tmp_path / "max"), [],
      min_step=10)
  latent = np.minimum(np.linspace(0.1, 0.9, 40), rng.uniform(0.3, 0.6))
  latent -= np.linspace(0, rng.uniform(0, 0.2), 40)
  difficulty = rng.uniform(size=300)
  for step, level in enumerate(latent, 1):
    noise = rng.normal(0, 0.05, 300)
    hits = (difficulty + noise < level).astype(float)
    for kept in (curve, maximum):
      kept.record(step, {"p": hits.mean(), units.UNITS: units.per_point(hits)}, "p", model)
    assert maximum.curve == curve.curve
    assert maximum.should_stop(step) == curve.should_stop(step)
    values = [e.value for e in curve.curve]
    assert maximum.best_step == curve.curve[int(np.argmax(values))].step
    if curve.should_stop(step):
      assert step >= 10
      assert curve.best_step <= step - rule.patience
      assert curve.latest <= max(values[:-1])
      break


@pytest.mark.parametrize("kwargs,message", [({"patience": 0}, "--patience must be >= 1"),
                                            ({"min_improvement_se": -1},
                                             "--min_improvement_se"),
                                            ({"smoothing": 0}, "--smoothing"),
                                            ({"report_model": "best"}, "--report_model")])
def test_bad_rules_name_the_flag(kwargs, message):
  with pytest.raises(ValueError, match=message):
    StoppingRule(**kwargs)


@pytest.mark.parametrize("report_model,reported", [("last_gain", 20), ("maximum", 40)])
def test_keras_callback_stops_and_keeps_the_reported_weights(report_model, reported,
                                                             tmp_path):
  """The callback evaluates after each Keras epoch (here: a hand-made curve
  indexed by the step), stops on the rule past the minimum, keeps the weights
  of the model the rule reports, and reads the last gain's units back on
  resume."""
  model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(2,))])
  model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
  values = dict(VALUES)
  weights_at = {}

  def evaluate(m):
    step = (len(weights_at) + 1) * 5
    weights_at[step] = m.get_weights()[0].copy()
    return {"global_recall@10": values[step], units.UNITS: first_hits(values[step])}

  metrics_path = str(tmp_path / "metrics.csv")
  callback = centralized_loop.ValidationAndStopping(
      evaluate, StoppingRule(patience=3, min_improvement_se=1.5, report_model=report_model),
      "val", "global_recall@10", steps_per_epoch=5,
      batch_size=4, min_steps=50, metrics_path=metrics_path, label="test", epochs=12,
      output_dir=str(tmp_path))
  data = tf.data.Dataset.from_tensor_slices(
      (np.ones((20, 2), np.float32), np.zeros((20, 1), np.float32))).batch(4).repeat()
  model.fit(data, epochs=12, steps_per_epoch=5, verbose=0, callbacks=[callback])
  # The rule would stop at 45; the minimum budget (50 steps) holds it to 50.
  assert [e.step for e in callback.curve.curve] == list(range(5, 55, 5))
  assert callback.curve.restore_best(model) == reported
  np.testing.assert_array_equal(model.get_weights()[0], weights_at[reported])
  with open(metrics_path) as f:
    rows = list(csv.DictReader(f))
  assert [float(r["val_global_recall@10"]) for r in rows] == [v for _, v in VALUES[:10]]
  assert [r["val_improved"] for r in rows] == ["1"] * 4 + ["0"] * 6
  assert [int(r["examples_seen"]) for r in rows] == [20 * (i + 1) for i in range(10)]
  # A resumed run (Keras epoch 6 onwards) reads the earlier curve back, and
  # its next evaluation is measured against round 20's units.
  resumed = centralized_loop.ValidationAndStopping(
      evaluate, StoppingRule(patience=3, min_improvement_se=1.5, report_model=report_model),
      "val", "global_recall@10", 5, 4, 50, metrics_path, "test", 12, str(tmp_path))
  resumed.on_epoch_begin(6)
  assert resumed.curve.curve == curve_of(StoppingRule(min_improvement_se=1.5), VALUES[:6])
  assert not resumed.curve.rule.improves(
      first_hits(0.31), resumed.curve._last_gain_units)  # pylint: disable=protected-access
