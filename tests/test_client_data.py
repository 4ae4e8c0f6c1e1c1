"""Client datasets: one per user, lazily built, batched without dropping examples."""

import numpy as np
import pytest
import tensorflow as tf

from tasks import client_data
from tasks.movielens import sequence_examples as se


def make_examples():
  users = np.array([3, 3, 3, 5, 9, 9])
  contexts = np.arange(12, dtype=np.int32).reshape(6, 2)
  labels = np.array([10, 11, 12, 13, 14, 15], np.int32)
  return se.Examples(users, contexts, labels)


def test_one_client_per_user_with_its_examples():
  data = client_data.ClientDatasets.from_examples(make_examples())
  assert data.client_ids == ["3", "5", "9"]
  assert data.num_examples("3") == 3
  elements = list(data.training_dataset("9", batch_size=1).unbatch().as_numpy_iterator())
  assert [label for _, label in elements] == [14, 15]
  np.testing.assert_array_equal(elements[0][0], [8, 9])
  spec = data.training_dataset("5", 4).element_spec
  assert spec[0].shape.as_list() == [None, 2] and spec[1].shape.as_list() == [None]


def test_batching_keeps_the_short_last_batch_and_shuffles_each_epoch():
  data = client_data.ClientDatasets.from_examples(make_examples())
  batches = list(data.training_dataset("3", batch_size=2, epochs=2,
                                       shuffle_seed=1).as_numpy_iterator())
  assert [len(labels) for _, labels in batches] == [2, 2, 2]
  labels = np.concatenate([l for _, l in batches])
  assert sorted(labels[:3]) == sorted(labels[3:]) == [10, 11, 12]
  again = list(data.training_dataset("3", 2, 2, shuffle_seed=1).as_numpy_iterator())
  assert np.array_equal(np.concatenate([l for _, l in again]), labels)
  # NumPy's shuffle of the client's examples by default_rng(seed), each epoch in turn.
  rng = np.random.default_rng(1)
  np.testing.assert_array_equal(labels, np.concatenate(
      [np.array([10, 11, 12])[rng.permutation(3)] for _ in range(2)]))
  unshuffled = data.training_dataset("3", 2, 2).unbatch()
  assert [int(l) for _, l in unshuffled] == [10, 11, 12, 10, 11, 12]


def test_max_steps_caps_a_clients_batches_with_a_seeded_sample():
  data = client_data.ClientDatasets.from_examples(make_examples())
  capped = [l for _, l in data.training_dataset(
      "3", batch_size=1, shuffle_seed=4, max_steps=2).as_numpy_iterator()]
  assert len(capped) == 2 and set(np.concatenate(capped)) < {10, 11, 12}
  other_rounds = {tuple(np.concatenate([l for _, l in data.training_dataset(
      "3", 1, shuffle_seed=seed, max_steps=2).as_numpy_iterator()]))
                  for seed in range(20)}
  assert len(other_rounds) > 1  # Each round's seed draws its own sample.
  small = data.training_dataset("5", batch_size=4, max_steps=2)
  assert [len(l) for _, l in small.as_numpy_iterator()] == [1]
  with pytest.raises(ValueError, match="--max_local_steps must be >= 1, got 0"):
    data.training_dataset("3", 1, max_steps=0)


def test_centralized_chunks_hold_every_example_once_in_order():
  batches = list(client_data.centralized_chunks(make_examples(), chunk_size=4))
  assert [list(l) for _, l in batches] == [[10, 11, 12, 13], [14, 15]]
  for contexts, labels in batches:  # Rows stay together.
    np.testing.assert_array_equal(contexts[:, 0], 2 * (labels - 10))


def test_shuffled_batches_reshuffle_each_pass_and_repeat_by_seed():
  arrays = (np.arange(20).reshape(10, 2), np.arange(10))
  forever = client_data.shuffled_batches(arrays, 3, shuffle_seed=5, epochs=None)
  passes = [np.concatenate([l for _, l in forever.skip(4 * p).take(4)
                            .as_numpy_iterator()]) for p in range(3)]
  assert all(sorted(p) == list(range(10)) for p in passes)  # 3 + 3 + 3 + 1 a pass.
  assert not np.array_equal(passes[0], passes[1])
  two = np.concatenate([l for _, l in client_data.shuffled_batches(
      arrays, 3, shuffle_seed=5, epochs=2).as_numpy_iterator()])
  np.testing.assert_array_equal(two, np.concatenate(passes[:2]))
  other_seed = np.concatenate([l for _, l in client_data.shuffled_batches(
      arrays, 3, shuffle_seed=6, epochs=1).as_numpy_iterator()])
  assert not np.array_equal(other_seed, passes[0])


def test_a_shard_holds_its_clients_batches_in_turn_each_first_one_marked():
  data = client_data.ClientDatasets.from_examples(make_examples())
  clients, seeds = ["3", "9", "5"], [7, None, 2]
  dataset = data.shard_dataset(clients, batch_size=2, epochs=2, shuffle_seeds=seeds,
                               max_steps=2)
  (shard,) = dataset
  arrays = client_data.shard_arrays(dataset)  # What a sub-model process sends.
  assert client_data.shard_clients(arrays) == 3
  for array, tensor in zip(tf.nest.flatten(arrays), tf.nest.flatten(shard)):
    assert isinstance(array, np.ndarray)
    np.testing.assert_array_equal(array, tensor)
  expected = [batch for client, seed in zip(clients, seeds)
              for batch in data.training_dataset(client, 2, 2, seed, 2).as_numpy_iterator()]
  assert len(expected) == 2 + 2 + 1
  # Client 5 has one example, twice (2 epochs): its one batch holds both.
  assert list(shard.batch_ends) == [2, 4, 6, 8, 10]
  assert list(shard.starts_client) == [True, False, True, False, True]
  for index, (inputs, labels) in enumerate(expected):
    batch_inputs, batch_labels = client_data.shard_batch(shard, tf.constant(index))
    np.testing.assert_array_equal(batch_inputs, inputs)
    np.testing.assert_array_equal(batch_labels, labels)
  # Every batch but a client's last is full: sliced with the static batch size.
  checked = client_data.checked_shard(shard, 2)
  for index in (0, 2):
    static = client_data.shard_batch(checked, tf.constant(index), length=2)
    assert static[1].shape == (2,)
    for got, want in zip(static, expected[index]):
      np.testing.assert_array_equal(got, want)
  with pytest.raises(tf.errors.InvalidArgumentError, match="batch size 3"):
    client_data.checked_shard(shard, 3)
  np.testing.assert_array_equal(client_data.shard_client_bounds(shard), [0, 4, 8, 10])
  np.testing.assert_array_equal(client_data.shard_client_batches(shard), [0, 2, 4, 5])
  with_positives = client_data.ClientDatasets.from_examples(make_examples(), True)
  (shard,) = with_positives.shard_dataset(["5"], 4, 1, [None])
  inputs, labels = shard.examples
  np.testing.assert_array_equal(inputs[1], labels)  # (context, label), label.
