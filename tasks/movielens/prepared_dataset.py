"""Writes a task's centralized examples as TFRecord files, `stats.json` and
`item_ids.npy` (the ratings file's movie id of each dense item id in the records).

The output directory appears whole or not at all: everything is written to a
temporary sibling directory that is renamed at the end.
"""

import json
import os

import tensorflow as tf

from tasks import atomic_output
from tasks.movielens.movielens_task import MovieLensTask
from tasks.movielens.sequence_examples import Examples


def feature_spec(max_context_length: int) -> dict:
  """The `tf.io.parse_example` spec of the written records."""
  return {
      "user_id": tf.io.FixedLenFeature([], tf.int64),
      "context": tf.io.FixedLenFeature([max_context_length], tf.int64),
      "label": tf.io.FixedLenFeature([], tf.int64),
  }


def _int64_feature(values) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def write_tfrecord(examples: Examples, path: str) -> None:
  with tf.io.TFRecordWriter(path) as writer:
    for user, context, label in zip(examples.user_ids, examples.contexts,
                                    examples.labels):
      record = tf.train.Example(features=tf.train.Features(feature={
          "user_id": _int64_feature([user]),
          "context": _int64_feature(context),
          "label": _int64_feature([label]),
      }))
      writer.write(record.SerializeToString())


def write_prepared_dataset(task: MovieLensTask, output_dir: str) -> dict:
  """Writes train.tfrecord, test.tfrecord, stats.json and item_ids.npy;
  returns the stats."""
  with atomic_output.staged_directory(output_dir) as staging:
    write_tfrecord(task.centralized_train, os.path.join(staging, "train.tfrecord"))
    write_tfrecord(task.centralized_test, os.path.join(staging, "test.tfrecord"))
    task.items.save(staging)
    stats = task.statistics()
    stats["config"] = task.config.describe()
    with open(os.path.join(staging, "stats.json"), "w") as f:
      json.dump(stats, f, indent=2)
  return stats
