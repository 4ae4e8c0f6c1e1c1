"""An outside reference: TensorFlow Recommenders' own sequential-retrieval
recipe on a task's split, scored as the project scores its runs.

The model is the TFRS tutorial's ("Recommending movies: retrieval using a
sequential model"): a query tower that embeds the context's items (32
dimensions, padding masked) and summarizes them with a GRU, a candidate tower
that embeds the item, `tfrs.tasks.Retrieval` (softmax against the batch's
other positives), Adagrad at 0.1, 3 epochs. It trains on the pooled examples
of the federated training users and is tested on the same test users, with
the project's global recall@k over every item and its standard error over
users (`retrieval_evaluation`, `evaluation.units`): what a user of TFRS would
get on the same data, beside the comparison's centralized runs.
"""

import dataclasses
from typing import Any, Dict

import tensorflow as tf
import tensorflow_recommenders as tfrs

from fed_retrieval.evaluation import retrieval_evaluation
from fed_retrieval.evaluation import units
from tasks import client_data
from tasks.movielens.movielens_task import MovieLensTask


@dataclasses.dataclass(frozen=True)
class Recipe:
  """The tutorial's settings."""
  embedding_dim: int = 32
  learning_rate: float = 0.1
  batch_size: int = 128
  epochs: int = 3
  seed: int = 0


class SequentialRetrieval(tfrs.Model):
  """Context items -> GRU query; the next item -> its embedding."""

  def __init__(self, vocabulary_size: int, dim: int):
    super().__init__()
    self.query_model = tf.keras.Sequential([
        tf.keras.layers.Embedding(vocabulary_size, dim, mask_zero=True),
        tf.keras.layers.GRU(dim)])
    self.candidate_model = tf.keras.layers.Embedding(vocabulary_size, dim)
    self.task = tfrs.tasks.Retrieval()

  def compute_loss(self, features, training=False):
    contexts, labels = features
    # The project's contexts are most recent first; the GRU reads in time order.
    return self.task(self.query_model(tf.reverse(contexts, [1])),
                     self.candidate_model(labels), compute_metrics=False)

  def scores(self, contexts: tf.Tensor) -> tf.Tensor:
    """Scores of every item [B, V] (padding never retrieved)."""
    items = self.candidate_model(tf.range(self.candidate_model.input_dim))
    scores = tf.matmul(self.query_model(tf.reverse(contexts, [1])), items,
                       transpose_b=True)
    return tf.concat([tf.fill([tf.shape(scores)[0], 1], -1e9), scores[:, 1:]], 1)


def train_and_test(task: MovieLensTask, ks=(1, 5, 10), recipe: Recipe = Recipe()
                   ) -> Dict[str, Any]:
  """The recipe's test metrics on the task's test users (with the headline's
  `_se`)."""
  tf.keras.utils.set_random_seed(recipe.seed)
  model = SequentialRetrieval(task.vocabulary_size, recipe.embedding_dim)
  model.compile(optimizer=tf.keras.optimizers.Adagrad(recipe.learning_rate))
  contexts, labels = client_data.centralized_arrays(task.federated_train)
  data = tf.data.Dataset.from_tensor_slices((contexts, labels)).shuffle(
      len(labels), seed=recipe.seed).batch(recipe.batch_size)
  model.fit(data, epochs=recipe.epochs, verbose=0)
  return units.with_standard_error(retrieval_evaluation.evaluate(
      model.scores, task.federated_test, ks), f"global_recall@{max(ks)}")
