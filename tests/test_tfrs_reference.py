"""The outside reference: TFRS's sequential-retrieval recipe on the project's
split learns, and is scored as the project's runs are."""

from fed_retrieval.reports import tfrs_reference
from tasks.movielens import movielens_task

def test_the_tfrs_recipe_beats_popularity_on_the_same_test_users(tmp_path):
  task = movielens_task.build_task(movielens_task.TaskConfig(
      synthetic="small", cache_dir=str(tmp_path)))
  results = tfrs_reference.train_and_test(task, (1, 10), tfrs_reference.Recipe(epochs=1))
  popularity = 0.0446  # Most-popular recall@10 on the small preset's test users.
  assert results["global_recall@10"] > 2 * popularity
  assert results["global_recall@1"] <= results["global_recall@10"]
  assert 0 < results["global_recall@10_se"] < 0.05
