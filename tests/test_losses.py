"""Each loss and its gradient against an independent NumPy reference."""

import numpy as np
import pytest
import tensorflow as tf

from losses import registry
from losses import retrieval_losses
from losses import spreadout
from losses.spreadout import SpreadoutWeights

B, V, T = 6, 9, 0.3


def random_case(seed=0, repeated_labels=False):
  rng = np.random.default_rng(seed)
  scores = rng.uniform(-1, 1, (B, V))
  scores[:, 0] = -1e9
  labels = rng.choice(np.arange(1, V), B, replace=repeated_labels)
  if repeated_labels:
    labels[1] = labels[0]
  return labels.astype(np.int32), scores


def softmax(x):
  e = np.exp(x - x.max(axis=1, keepdims=True))
  return e / e.sum(axis=1, keepdims=True)


def numpy_global_softmax(labels, scores):
  probabilities = softmax(scores / T)
  loss = -np.log(probabilities[np.arange(B), labels]).mean()
  gradient = probabilities.copy()
  gradient[np.arange(B), labels] -= 1
  return loss, gradient / T / B


def numpy_batch_softmax(labels, scores, remove_accidental_hits=False):
  logits = scores[:, labels] / T
  if remove_accidental_hits:
    accidental = (labels[:, None] == labels[None, :]) & ~np.eye(B, dtype=bool)
    logits = np.where(accidental, -1e9, logits)
  probabilities = softmax(logits)
  loss = -np.log(np.diag(probabilities)).mean()
  d_logits = (probabilities - np.eye(B)) / B
  gradient = np.zeros_like(scores)
  for i in range(B):
    for j in range(B):
      gradient[i, labels[j]] += d_logits[i, j] / T
  return loss, gradient


def numpy_hinge(labels, scores, margin, power):
  positive = scores[np.arange(B), labels]
  slack = np.maximum(0.0, margin - positive)
  gradient = np.zeros_like(scores)
  gradient[np.arange(B), labels] = -power * slack**(power - 1) * (slack > 0) / B
  return (slack**power).mean(), gradient


def tf_loss_and_gradient(loss, labels, scores):
  scores = tf.Variable(scores)
  with tf.GradientTape() as tape:
    value = loss(tf.constant(labels), scores)
  return value.numpy(), tape.gradient(value, scores).numpy()


@pytest.mark.parametrize("repeated", [False, True])
def test_global_softmax(repeated):
  labels, scores = random_case(1, repeated)
  value, gradient = tf_loss_and_gradient(
      retrieval_losses.GlobalSoftmaxLoss(temperature=T), labels, scores)
  reference, reference_gradient = numpy_global_softmax(labels, scores)
  np.testing.assert_allclose(value, reference, rtol=1e-6)
  np.testing.assert_allclose(gradient, reference_gradient, atol=1e-9)


@pytest.mark.parametrize("repeated,remove", [(False, False), (True, False), (True, True)])
def test_batch_softmax(repeated, remove):
  labels, scores = random_case(2, repeated)
  value, gradient = tf_loss_and_gradient(
      retrieval_losses.BatchSoftmaxLoss(T, remove_accidental_hits=remove),
      labels, scores)
  reference, reference_gradient = numpy_batch_softmax(labels, scores, remove)
  np.testing.assert_allclose(value, reference, rtol=1e-6)
  np.testing.assert_allclose(gradient, reference_gradient, atol=1e-9)


@pytest.mark.parametrize("power", [1, 2])
def test_hinge(power):
  labels, scores = random_case(3)
  value, gradient = tf_loss_and_gradient(
      retrieval_losses.HingeLoss(margin=0.4, power=power), labels, scores)
  reference, reference_gradient = numpy_hinge(labels, scores, 0.4, power)
  np.testing.assert_allclose(value, reference, rtol=1e-6)
  np.testing.assert_allclose(gradient, reference_gradient, atol=1e-9)


def numpy_spreadout(table, form="frobenius", skip_padding=True):
  rows = table[1:] if skip_padding else table
  rows = rows / np.linalg.norm(rows, axis=1, keepdims=True)
  n = rows.shape[0]
  squares = sum((rows[i] @ rows[j])**2 for i in range(n) for j in range(n) if i != j)
  return np.sqrt(squares) if form == "frobenius" else squares / (n * (n - 1))


def numeric_gradient(function, x, step=1e-6):
  gradient = np.zeros_like(x)
  for index in np.ndindex(*x.shape):
    delta = np.zeros_like(x)
    delta[index] = step
    gradient[index] = (function(x + delta) - function(x - delta)) / (2 * step)
  return gradient


@pytest.mark.parametrize("form", ["frobenius", "mean"])
def test_spreadout_value_and_gradient(form):
  table = np.random.default_rng(4).normal(size=(7, 3))
  regularizer = spreadout.SpreadoutRegularizer(weight=2.5, form=form)
  variable = tf.Variable(table)
  with tf.GradientTape() as tape:
    value = regularizer(variable)
  gradient = tape.gradient(value, variable).numpy()
  np.testing.assert_allclose(value.numpy(), 2.5 * numpy_spreadout(table, form),
                             rtol=1e-10)
  np.testing.assert_allclose(
      gradient, numeric_gradient(lambda t: 2.5 * numpy_spreadout(t, form), table),
      atol=1e-7)
  assert gradient[0].tolist() == [0, 0, 0]  # Padding row untouched.


@pytest.mark.parametrize("form,expected_ratio", [("frobenius", 1.0), ("mean", 1 / 16)])
def test_spreadout_push_per_row_versus_vocabulary_size(form, expected_ratio):
  """On a half-collapsed table (what the hinge loss drives towards), Frobenius
  pushes each row as hard at 1,600 rows as at 100; mean 16x less."""

  def mean_row_push(n):
    rng = np.random.default_rng(n)
    table = tf.Variable(1.0 + 0.5 * rng.normal(size=(n + 1, 8)))
    with tf.GradientTape() as tape:
      value = spreadout.spreadout(table, form, exclude_first_row=True)
    return np.linalg.norm(tape.gradient(value, table).numpy()[1:], axis=1).mean()

  ratio = mean_row_push(1600) / mean_row_push(100)
  assert expected_ratio / 1.5 < ratio < expected_ratio * 1.5


def test_spreadout_is_lowest_for_orthogonal_rows():
  orthogonal = np.vstack([np.zeros(4), np.eye(4)])
  collapsed = np.vstack([np.zeros(4), np.ones((4, 4))])
  for form, collapsed_value in (("mean", 1.0), ("frobenius", np.sqrt(12.0))):
    assert spreadout.spreadout(tf.constant(orthogonal), form,
                               exclude_first_row=True).numpy() == pytest.approx(
                                   0.0, abs=1e-6)
    assert spreadout.spreadout(tf.constant(collapsed), form,
                               exclude_first_row=True).numpy() == pytest.approx(
                                   collapsed_value)


@pytest.mark.parametrize("form", ["frobenius", "mean"])
def test_cross_spreadout_is_added_to_every_loss(form):
  labels, scores = random_case(6)
  batch = scores[:, labels]
  off_diagonal = batch[~np.eye(B, dtype=bool)]
  squares = np.sum(off_diagonal**2)
  cross = np.sqrt(squares) if form == "frobenius" else squares / (B * (B - 1))
  for plain, with_cross in [
      (retrieval_losses.HingeLoss(0.5),
       retrieval_losses.HingeLoss(0.5, cross_spreadout_weight=0.7, spreadout_form=form)),
      (retrieval_losses.GlobalSoftmaxLoss(T),
       retrieval_losses.GlobalSoftmaxLoss(T, cross_spreadout_weight=0.7,
                                          spreadout_form=form))]:
    assert with_cross(labels, scores).numpy() == pytest.approx(
        plain(labels, scores).numpy() + 0.7 * cross, rel=1e-6)


def numpy_negative_spreadout(labels, scores, margin, form):
  """Per example: the scores above `margin` of every real item but the positive."""
  values = []
  for i in range(B):
    negatives = np.delete(np.arange(1, V), labels[i] - 1)  # column 0 is padding
    excess = np.maximum(0.0, scores[i, negatives] - margin)
    squares = np.sum(excess**2)
    values.append(np.sqrt(squares) if form == "frobenius" else squares / len(negatives))
  return np.array(values)


@pytest.mark.parametrize("form", ["frobenius", "mean"])
@pytest.mark.parametrize("margin", [-1.0, 0.0, 0.5])
def test_negative_spreadout_value_and_gradient(form, margin):
  labels, scores = random_case(8)
  reference = numpy_negative_spreadout(labels, scores, margin, form)
  values = spreadout.negative_spreadout(tf.constant(labels), tf.constant(scores),
                                        margin, form).numpy()
  np.testing.assert_allclose(values, reference, rtol=1e-6)
  # d/ds_ij: r_ij / sqrt(sum r^2) (frobenius) or 2 r_ij / n (mean), per example.
  excess = np.maximum(0.0, scores - margin)
  excess[:, 0] = 0.0
  excess[np.arange(B), labels] = 0.0
  expected = (excess / np.maximum(reference, 1e-30)[:, None] if form == "frobenius"
              else 2 * excess / (V - 2))
  variable = tf.Variable(scores)
  with tf.GradientTape() as tape:
    total = tf.reduce_sum(spreadout.negative_spreadout(tf.constant(labels), variable,
                                                       margin, form))
  np.testing.assert_allclose(tape.gradient(total, variable).numpy(), expected,
                             rtol=1e-6, atol=1e-12)


def test_negative_spreadout_ignores_scores_below_the_margin_and_the_positive():
  labels = np.array([1, 2], np.int32)
  scores = np.array([[-1e9, 0.9, 0.6, 0.2], [-1e9, 0.7, 0.95, 0.5]])
  values = spreadout.negative_spreadout(labels, scores, 0.5, "frobenius").numpy()
  np.testing.assert_allclose(values, [0.1, 0.2], rtol=1e-5)


def test_negative_spreadout_is_added_per_example():
  labels, scores = random_case(9)
  negative = numpy_negative_spreadout(labels, scores, 0.3, "frobenius")
  plain = retrieval_losses.HingeLoss(0.5)
  with_negative = retrieval_losses.HingeLoss(0.5, negative_spreadout_weight=0.2,
                                             negative_margin=0.3)
  assert with_negative(labels, scores).numpy() == pytest.approx(
      plain(labels, scores).numpy() + 0.2 * negative.mean(), rel=1e-6)


def test_hinge_defaults_to_the_squared_hinge():
  labels, scores = random_case(7)
  reference, _ = numpy_hinge(labels, scores, 0.9, 2)
  assert retrieval_losses.HingeLoss()(labels, scores).numpy() == pytest.approx(reference)


@pytest.mark.parametrize("loss", [
    retrieval_losses.BatchSoftmaxLoss(0.1, remove_accidental_hits=True),
    retrieval_losses.GlobalSoftmaxLoss(0.2),
    retrieval_losses.HingeLoss(0.5, power=1, cross_spreadout_weight=0.3,
                               spreadout_form="mean", negative_spreadout_weight=0.2,
                               negative_margin=0.1),
])
def test_losses_rebuild_from_config(loss):
  rebuilt = type(loss).from_config(loss.get_config())
  labels, scores = random_case(5)
  assert rebuilt(labels, scores).numpy() == pytest.approx(loss(labels, scores).numpy())


def test_spreadout_regularizer_rebuilds_from_config():
  regularizer = spreadout.SpreadoutRegularizer(0.3, form="mean", normalize=False)
  rebuilt = spreadout.SpreadoutRegularizer.from_config(regularizer.get_config())
  table = tf.constant(np.random.default_rng(0).normal(size=(5, 2)))
  assert rebuilt(table).numpy() == pytest.approx(regularizer(table).numpy())


def test_registry_names_and_weights():
  assert registry.objective("hinge_spreadout").spreadout == SpreadoutWeights(
      item=registry.DEFAULT_ITEM_SPREADOUT_WEIGHT,
      negative=registry.DEFAULT_NEGATIVE_SPREADOUT_WEIGHTS["hinge_spreadout"])
  assert registry.objective("batch_softmax_spreadout").spreadout == SpreadoutWeights(
      item=registry.DEFAULT_ITEM_SPREADOUT_WEIGHT, negative=0.0)
  custom = SpreadoutWeights(item=0.25, cross=0.5, negative=0.0)
  built = registry.objective("hinge_spreadout", custom)
  assert built.spreadout == custom and built.loss.cross_spreadout_weight == 0.5
  assert built.loss.negative_spreadout_weight == 0.0
  assert built.loss.power == 2
  assert not registry.objective("global_softmax").spreadout.any
  assert isinstance(registry.objective("batch_softmax_spreadout").loss,
                    retrieval_losses.BatchSoftmaxLoss)
  config = registry.ObjectiveConfig("hinge_spreadout", custom)
  assert config.for_loss("global_softmax").build().spreadout == SpreadoutWeights(
      negative=0.0)
  assert config.for_loss("batch_softmax_spreadout").spreadout == custom


def test_an_unset_negative_weight_is_each_losss_default():
  """A comparison gives H+S its negative term and BS + spreadout none, whatever
  other spreadout the flags set."""
  config = registry.ObjectiveConfig("hinge_spreadout", SpreadoutWeights(item=0.3))
  hinge = config.build()
  assert hinge.spreadout.item == 0.3
  assert hinge.loss.negative_spreadout_weight == (
      registry.DEFAULT_NEGATIVE_SPREADOUT_WEIGHTS["hinge_spreadout"])
  batch = config.for_loss("batch_softmax_spreadout").build()
  assert batch.spreadout.item == 0.3 and batch.loss.negative_spreadout_weight == 0.0


@pytest.mark.parametrize("call,message", [
    (lambda: registry.objective("softmax"), "--loss: unknown loss 'softmax'"),
    (lambda: SpreadoutWeights(item=-1.0), "--spreadout_weight must be >= 0"),
    (lambda: SpreadoutWeights(cross=-1.0), "--cross_spreadout_weight must be >= 0"),
    (lambda: SpreadoutWeights(negative=-1.0),
     "--negative_spreadout_weight must be >= 0"),
    (lambda: SpreadoutWeights(negative_margin=1.0), "--negative_margin is a cosine"),
    (lambda: registry.objective("global_softmax", SpreadoutWeights(negative=0.1)),
     "--spreadout_weight is for the \\*_spreadout losses"),
    (lambda: SpreadoutWeights(form="max"), "--spreadout_form must be one of"),
    (lambda: registry.objective("hinge", SpreadoutWeights(item=0.5)),
     "use hinge_spreadout"),
    (lambda: retrieval_losses.HingeLoss(power=3), "--hinge_power must be 1 or 2"),
    (lambda: registry.objective("hinge", margin=-0.1), "--margin must be > 0"),
    (lambda: registry.objective("global_softmax", temperature=0), "--temperature must be > 0"),
])
def test_bad_objectives_name_the_flag(call, message):
  with pytest.raises(ValueError, match=message):
    call()
