"""FedPU under the project's FedAvg: one round against a hand computation, and
FedPU against Baseline-1 on a small non-overlapping partition of digits."""

import dataclasses
import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from fed_retrieval.algorithms import fedavg
from fed_retrieval.training import federated_loop
from losses import pu_risk
from tasks.pu import family as pu_family
from tasks.pu import pu_task
from tasks.pu.settings import PUSettings
from tests import pu_reference
from tests.configs import fedavg_and_loop

C, D = 3, 4
POSITIVES = {0: np.array([0]), 1: np.array([1, 2])}
PRIORS = {0: np.array([.2, .4, .4]), 1: np.array([.5, .3, .2])}
RNG = np.random.default_rng(5)
W0 = RNG.normal(size=(D, C)).astype(np.float32)
B0 = RNG.normal(size=C).astype(np.float32) * 0.1
CLIENTS = {  # (inputs, true labels, labeled)
    0: (RNG.normal(size=(5, D)).astype(np.float32), np.array([0, 0, 1, 2, 0]),
        np.array([1, 1, 0, 0, 0], bool)),
    1: (RNG.normal(size=(4, D)).astype(np.float32), np.array([1, 2, 0, 2]),
        np.array([1, 1, 0, 0], bool)),
}


def linear_model_fn():
  inputs = tf.keras.Input(shape=(D,))
  logits = tf.keras.layers.Dense(
      C, kernel_initializer=tf.keras.initializers.Constant(W0),
      bias_initializer=tf.keras.initializers.Constant(B0))(inputs)
  return tff.learning.models.from_keras_model(
      tf.keras.Model(inputs, logits), loss=pu_risk.PURiskLoss("probability"),
      input_spec=(tf.TensorSpec([None, D], tf.float32),
                  tf.TensorSpec([None, 3 * C + 1], tf.float32)))


def client_risk(weights: np.ndarray, client: int) -> float:
  """Eq. 10 of the client from the NumPy reference (weights = [W | b] flat)."""
  x, labels, labeled = CLIENTS[client]
  w = weights[:D * C].reshape(D, C)
  logits = x.astype(np.float64) @ w + weights[D * C:]
  terms = pu_reference.fedpu_terms(logits, labels, labeled, client, POSITIVES, PRIORS,
                                   "probability")
  return sum(terms.values())


def central_difference_gradient(weights: np.ndarray, client: int) -> np.ndarray:
  step, gradient = 1e-5, np.zeros_like(weights)
  for i in range(len(weights)):
    up, down = weights.copy(), weights.copy()
    up[i] += step
    down[i] -= step
    gradient[i] = (client_risk(up, client) - client_risk(down, client)) / (2 * step)
  return gradient


def test_fedavg_round_with_the_fedpu_loss_matches_hand_computation(tff_context):
  datasets = []
  for k, (x, labels, labeled) in CLIENTS.items():
    targets = pu_risk.pu_targets("fedpu", labels, labeled, POSITIVES[k], C, PRIORS[k],
                                 pu_risk.cross_client_weights(POSITIVES, PRIORS, C, k))
    datasets.append(tf.data.Dataset.from_tensor_slices((x, targets)).batch(len(x)))
  process = fedavg.build_learning_process(linear_model_fn, *fedavg_and_loop(
      client_learning_rate=0.3, server_optimizer="sgd", server_learning_rate=1.0,
      client_shards=0))
  output = process.next(process.initialize(), datasets)
  kernel, bias = process.get_model_weights(output.state).trainable
  # One SGD step per client on its single batch; the server averages the new
  # models weighted by the clients' points (5 and 4).
  start = np.concatenate([W0.reshape(-1), B0]).astype(np.float64)
  updated = [start - 0.3 * central_difference_gradient(start, k) for k in CLIENTS]
  expected = (5 * updated[0] + 4 * updated[1]) / 9
  np.testing.assert_allclose(np.asarray(kernel).reshape(-1), expected[:D * C], atol=1e-5)
  np.testing.assert_allclose(np.asarray(bias), expected[D * C:], atol=1e-5)
  assert not np.allclose(expected, start, atol=1e-3)  # The round did move the model.


@pytest.mark.runs_long
def test_fedpu_beats_positive_only_without_overlap(tff_context, tmp_path):
  # Ten clients, one class each (the paper's hardest iid row), on digits.
  task = pu_task.build_pu_task(pu_task.PUTaskConfig(setting=pu_task.SETTINGS["iid_10x1"]))
  base = PUSettings(task.config)
  settings = dataclasses.replace(base, loop=dataclasses.replace(
      base.loop, rounds=20, eval_every=20, checkpoint_every=20))
  accuracy = {}
  for method in ("fedpu", "positive_only"):
    results = federated_loop.run_federated(
        pu_family.federated_job(task, settings, method), settings.loop_for(task),
        str(tmp_path / method))
    accuracy[method] = results["test"]["accuracy"]
  assert accuracy["fedpu"] > 0.6
  assert accuracy["fedpu"] > accuracy["positive_only"] + 0.2, accuracy
  majority = pu_family.majority_class_baseline(task)["accuracy"]
  assert results["majority_class_baseline"]["accuracy"] == majority
  assert 0.05 < majority < 0.15  # Digits: ten classes of about equal size.


def test_local_work_is_sized_to_the_clients_data():
  settings = PUSettings(pu_task.PUTaskConfig())
  small = types.SimpleNamespace(mean_client_points=lambda: 130.0, num_clients=lambda: 10)
  large = types.SimpleNamespace(mean_client_points=lambda: 720.0, num_clients=lambda: 10)
  digits = settings.loop_for(small)
  assert (digits.batch_size, digits.local_epochs) == (16, 5)
  mnist = settings.loop_for(large)
  assert (mnist.batch_size, mnist.local_epochs) == (100, 1)
  assert mnist.max_passes == settings.loop.max_passes
  given = dataclasses.replace(settings, size_local_work=False)  # --batch_size given.
  assert given.loop_for(large) == given.loop
  # A share of the clients a round becomes a count of these ten.
  shared = dataclasses.replace(settings, loop=dataclasses.replace(
      settings.loop, clients_fraction=0.25))
  assert shared.loop_for(small).clients_per_round == 3
