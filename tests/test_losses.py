"""Each loss and its gradient against an independent NumPy reference."""

import numpy as np
import pytest
import tensorflow as tf

from losses import registry
from losses import retrieval_losses
from losses import spreadout

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


def numpy_spreadout(table):
  rows = table[1:] / np.linalg.norm(table[1:], axis=1, keepdims=True)
  n = rows.shape[0]
  return sum((rows[i] @ rows[j])**2 for i in range(n) for j in range(n) if i != j) / (
      n * (n - 1))


def test_spreadout_value_and_gradient():
  table = np.random.default_rng(4).normal(size=(7, 3))
  regularizer = spreadout.SpreadoutRegularizer(weight=2.5)
  variable = tf.Variable(table)
  with tf.GradientTape() as tape:
    value = regularizer(variable)
  gradient = tape.gradient(value, variable).numpy()
  np.testing.assert_allclose(value.numpy(), 2.5 * numpy_spreadout(table), rtol=1e-10)
  numeric = np.zeros_like(table)
  for index in np.ndindex(*table.shape):
    step = np.zeros_like(table)
    step[index] = 1e-6
    numeric[index] = 2.5 * (numpy_spreadout(table + step) -
                            numpy_spreadout(table - step)) / 2e-6
  np.testing.assert_allclose(gradient, numeric, atol=1e-7)
  assert gradient[0].tolist() == [0, 0, 0]  # Padding row untouched.


def test_spreadout_is_lowest_for_orthogonal_rows():
  orthogonal = np.vstack([np.zeros(4), np.eye(4)])
  collapsed = np.vstack([np.zeros(4), np.ones((4, 4))])
  assert spreadout.spreadout(tf.constant(orthogonal)).numpy() == pytest.approx(0.0)
  assert spreadout.spreadout(tf.constant(collapsed)).numpy() == pytest.approx(1.0)


@pytest.mark.parametrize("loss", [
    retrieval_losses.BatchSoftmaxLoss(0.1, remove_accidental_hits=True),
    retrieval_losses.GlobalSoftmaxLoss(0.2),
    retrieval_losses.HingeLoss(0.5, power=2),
])
def test_losses_rebuild_from_config(loss):
  rebuilt = type(loss).from_config(loss.get_config())
  labels, scores = random_case(5)
  assert rebuilt(labels, scores).numpy() == pytest.approx(loss(labels, scores).numpy())


def test_spreadout_regularizer_rebuilds_from_config():
  regularizer = spreadout.SpreadoutRegularizer(0.3, normalize=False)
  rebuilt = spreadout.SpreadoutRegularizer.from_config(regularizer.get_config())
  table = tf.constant(np.random.default_rng(0).normal(size=(5, 2)))
  assert rebuilt(table).numpy() == pytest.approx(regularizer(table).numpy())


def test_registry_names_and_weights():
  assert registry.objective("hinge_spreadout").spreadout_weight == \
      registry.DEFAULT_SPREADOUT_WEIGHT
  assert registry.objective("hinge_spreadout", 0.25).spreadout_weight == 0.25
  assert registry.objective("global_softmax").spreadout_weight == 0.0
  assert isinstance(registry.objective("batch_softmax_spreadout").loss,
                    retrieval_losses.BatchSoftmaxLoss)


@pytest.mark.parametrize("call,message", [
    (lambda: registry.objective("softmax"), "--loss: unknown loss 'softmax'"),
    (lambda: registry.objective("hinge_spreadout", -1.0), "--spreadout_weight must be >= 0"),
    (lambda: registry.objective("hinge", 0.5), "use hinge_spreadout"),
    (lambda: registry.objective("hinge", margin=-0.1), "--margin must be > 0"),
    (lambda: registry.objective("global_softmax", temperature=0), "--temperature must be > 0"),
])
def test_bad_objectives_name_the_flag(call, message):
  with pytest.raises(ValueError, match=message):
    call()
