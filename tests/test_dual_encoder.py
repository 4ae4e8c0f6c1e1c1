"""The dual encoder's towers, shared table, masking and scores."""

import numpy as np
import pytest
import tensorflow as tf

from fed_retrieval.models import dual_encoder
from losses import registry
from losses import retrieval_losses
from losses.spreadout import SpreadoutWeights
from losses.spreadout import spreadout


def test_scores_are_cosines_of_masked_mean_contexts_against_items():
  config = dual_encoder.DualEncoderConfig(vocabulary_size=12, max_context_length=3,
                                          embedding_dim=4)
  model = dual_encoder.build_dual_encoder(config, seed=0)
  table = model.get_layer("query_tower").get_layer("item_embeddings").get_weights()[0]
  contexts = np.array([[3, 5, 0], [7, 0, 0]], np.int32)
  scores = model(contexts).numpy()
  assert scores.shape == (2, 12)
  unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)
  queries = unit(np.stack([table[[3, 5]].mean(0), table[7]]))
  expected = queries @ unit(table[1:]).T
  np.testing.assert_allclose(scores[:, 1:], expected, rtol=1e-5, atol=1e-6)
  assert np.all(scores[:, 0] == dual_encoder.PADDING_SCORE)
  # One table for both towers: a one-item context scores its own item at 1.
  assert scores[1, 7] == pytest.approx(1.0, abs=1e-6)


def test_hidden_layers_and_tower_shapes():
  config = dual_encoder.DualEncoderConfig(vocabulary_size=20, max_context_length=5,
                                          embedding_dim=8, context_hidden_dims=(32, 6),
                                          item_hidden_dims=(6,), normalize=False)
  model = dual_encoder.build_dual_encoder(config, seed=1)
  contexts = np.array([[1, 2, 3, 0, 0]], np.int32)
  assert dual_encoder.query_tower(model)(contexts).shape == (1, 6)
  assert dual_encoder.item_embeddings(model).shape == (20, 6)
  np.testing.assert_allclose(
      model(contexts).numpy()[0, 1:],
      (dual_encoder.query_tower(model)(contexts).numpy() @
       dual_encoder.item_embeddings(model).numpy().T)[0, 1:], rtol=1e-5, atol=1e-8)


def test_spreadout_is_a_model_loss_only_when_weighted():
  plain = dual_encoder.build_dual_encoder(
      dual_encoder.DualEncoderConfig(vocabulary_size=10), seed=0)
  spread = dual_encoder.build_dual_encoder(
      dual_encoder.DualEncoderConfig(vocabulary_size=10,
                                     spreadout=SpreadoutWeights(item=2.0)), seed=0)
  assert plain.losses == [] and len(spread.losses) == 1
  table = spread.get_layer("query_tower").get_layer("item_embeddings").embeddings
  np.testing.assert_allclose(spread.losses[0].numpy(),
                             2.0 * spreadout(table, exclude_first_row=True).numpy())


def test_context_spreadout_is_the_spreadout_of_the_batch_queries():
  model = dual_encoder.build_dual_encoder(
      dual_encoder.DualEncoderConfig(vocabulary_size=10, max_context_length=3,
                                     spreadout=SpreadoutWeights(context=0.5)), seed=0)
  contexts = tf.constant([[1, 2, 0], [3, 0, 0], [4, 5, 6], [7, 1, 0]])
  model(contexts, training=True)
  queries = dual_encoder.query_tower(model)(contexts)
  assert len(model.losses) == 1
  np.testing.assert_allclose(model.losses[0].numpy(),
                             0.5 * spreadout(queries).numpy(), rtol=1e-5)


def test_config_json_round_trip_and_validation():
  config = dual_encoder.DualEncoderConfig(
      vocabulary_size=30, context_hidden_dims=(8,), item_hidden_dims=(8,),
      spreadout=SpreadoutWeights(item=0.1, cross=0.2, form="mean"))
  assert dual_encoder.DualEncoderConfig.from_json(config.to_json()) == config
  with pytest.raises(ValueError, match="output dimensions differ"):
    dual_encoder.DualEncoderConfig(vocabulary_size=30, context_hidden_dims=(8,))


def test_weight_shapes_are_the_models_trainable_shapes():
  config = dual_encoder.DualEncoderConfig(vocabulary_size=30, embedding_dim=8,
                                         context_hidden_dims=(12, 6),
                                         item_hidden_dims=(6,))
  model = dual_encoder.build_dual_encoder(config)
  assert sorted(config.weight_shapes()) == sorted(
      tuple(v.shape) for v in model.trainable_variables)


@pytest.mark.parametrize("loss_name,spreadout_weights,hidden", [
    ("batch_softmax", SpreadoutWeights(), ()),
    ("batch_softmax_spreadout", SpreadoutWeights(item=0.1, cross=0.1, context=0.1), ()),
    ("hinge", SpreadoutWeights(), (6,)),
    ("hinge_spreadout", SpreadoutWeights(item=0.1, negative=0.0), (6,)),
])
def test_batch_candidates_give_the_full_paths_loss_and_gradients(loss_name,
                                                                spreadout_weights,
                                                                hidden):
  objective = registry.objective(loss_name, spreadout_weights)
  assert objective.candidates == "batch"
  full_loss = registry.make_loss(registry.base_loss_name(loss_name),
                                 spreadout=objective.spreadout)  # On [B, V].
  config = dual_encoder.DualEncoderConfig(
      vocabulary_size=30, max_context_length=4, embedding_dim=6,
      context_hidden_dims=hidden, item_hidden_dims=hidden,
      spreadout=objective.spreadout)
  model = dual_encoder.build_dual_encoder(config, seed=2)
  batch_model = dual_encoder.training_model(model, "batch")
  assert [v.name for v in batch_model.trainable_variables] == [
      v.name for v in model.trainable_variables]
  rng = np.random.default_rng(0)
  contexts = rng.integers(0, 30, size=(8, 4)).astype(np.int32)
  labels = rng.integers(1, 30, size=8).astype(np.int32)
  labels[5] = labels[2]  # A repeated positive.

  def loss_and_gradients(train_model, loss, inputs):
    with tf.GradientTape() as tape:
      value = tf.reduce_mean(loss(labels, train_model(inputs, training=True)))
      value += tf.add_n(train_model.losses) if train_model.losses else 0.0
    return value, tape.gradient(value, model.trainable_variables)

  full_value, full_gradients = loss_and_gradients(model, full_loss, contexts)
  value, gradients = loss_and_gradients(batch_model, objective.loss, (contexts, labels))
  assert float(value) == pytest.approx(float(full_value), rel=1e-5)
  for expected, given in zip(full_gradients, gradients):
    np.testing.assert_allclose(tf.convert_to_tensor(given).numpy(),
                               tf.convert_to_tensor(expected).numpy(),
                               rtol=1e-4, atol=1e-6)


def test_losses_that_read_every_item_refuse_batch_candidates():
  assert registry.objective("global_softmax").candidates == "vocabulary"
  assert registry.objective("hinge_spreadout").candidates == "vocabulary"  # Negative term.
  with pytest.raises(ValueError, match="reads every item's score"):
    retrieval_losses.GlobalSoftmaxLoss(candidates="batch")
  with pytest.raises(ValueError, match="reads every item's score"):
    retrieval_losses.HingeLoss(negative_spreadout_weight=0.1, candidates="batch")
  loss = retrieval_losses.HingeLoss(candidates="batch")
  with pytest.raises(tf.errors.InvalidArgumentError, match="positives"):
    loss(np.array([1, 2]), np.zeros((2, 30), np.float32))  # [B, V] given.
