"""Client datasets: one per user, lazily built, batched without dropping examples."""

import numpy as np

from tasks import client_data
from tasks import sequence_examples as se


def make_examples():
  users = np.array([3, 3, 3, 5, 9, 9])
  contexts = np.arange(12, dtype=np.int32).reshape(6, 2)
  labels = np.array([10, 11, 12, 13, 14, 15], np.int32)
  return se.Examples(users, contexts, labels)


def test_one_client_per_user_with_its_examples():
  data = client_data.client_data_from_examples(make_examples())
  assert sorted(data.client_ids) == ["3", "5", "9"]
  elements = list(data.create_tf_dataset_for_client("9").as_numpy_iterator())
  assert [label for _, label in elements] == [14, 15]
  np.testing.assert_array_equal(elements[0][0], [8, 9])
  spec = data.element_type_structure
  assert spec[0].shape.as_list() == [2] and spec[1].shape.as_list() == []


def test_batching_keeps_the_short_last_batch_and_repeats_epochs():
  dataset = client_data.client_data_from_examples(
      make_examples()).create_tf_dataset_for_client("3")
  batches = list(client_data.batch_for_training(dataset, batch_size=2, epochs=2,
                                                shuffle_seed=1).as_numpy_iterator())
  assert [len(labels) for _, labels in batches] == [2, 2, 2]
  assert sorted(np.concatenate([l for _, l in batches])) == [10, 10, 11, 11, 12, 12]


def test_centralized_dataset_covers_every_example_once():
  batches = list(client_data.centralized_dataset(make_examples(), batch_size=4,
                                                 shuffle_seed=0).as_numpy_iterator())
  assert [len(labels) for _, labels in batches] == [4, 2]
  assert sorted(np.concatenate([l for _, l in batches])) == list(range(10, 16))
