"""The MovieLens next-item task: ratings log -> examples -> federated and centralized splits."""

import dataclasses
import hashlib
import json
import math
import os
import sys
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd

from tasks.movielens import interaction_log
from tasks.movielens import item_vocabulary
from tasks.movielens import ratings_io
from tasks.movielens import sequence_examples
from tasks.movielens import synthetic_movielens
from tasks.movielens.sequence_examples import Examples

DEFAULT_CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "fed_retrieval")


@dataclasses.dataclass(frozen=True)
class TaskConfig:
  """Where the interactions come from (a MovieLens release, a log of one's
  own with its columns, or a synthetic preset), which count (`min_rating`:
  those rated at least that) and how they become examples and splits."""
  ratings_path: Optional[str] = None
  synthetic: Optional[str] = None
  interactions_path: Optional[str] = None
  log_columns: interaction_log.LogColumns = interaction_log.LogColumns()
  min_rating: Optional[float] = None
  max_context_length: int = 10
  min_timeline_length: int = 3
  max_examples_per_user: Optional[int] = None
  user_split: Tuple[float, ...] = (0.8, 0.1, 0.1)
  example_split: Tuple[float, ...] = (0.9, 0.1)
  shuffle_across_users: bool = False
  seed: int = 0
  cache_dir: str = DEFAULT_CACHE_DIR

  def __post_init__(self):
    sources = [self.ratings_path, self.synthetic, self.interactions_path]
    if sum(source is not None for source in sources) != 1:
      raise ValueError("Give exactly one of --ratings_path (a MovieLens release), "
                       "--interactions_path (a log of one's own) and --synthetic")
    sequence_examples.check_fractions(self.user_split, "user_split")
    if len(self.user_split) != 3:
      raise ValueError("--user_split takes 3 fractions (train,val,test), got "
                       f"{list(self.user_split)}")
    sequence_examples.check_fractions(self.example_split, "example_split")
    if len(self.example_split) != 2:
      raise ValueError("--example_split takes 2 fractions (train,test), got "
                       f"{list(self.example_split)}")

  def describe(self) -> Dict[str, object]:
    """The settings that determine the data (for run directories and logs);
    what a source does not read is left out (so runs made before it stay
    the same)."""
    described = dataclasses.asdict(self)
    del described["cache_dir"]
    if self.interactions_path is None:
      del described["log_columns"]
    return described


@dataclasses.dataclass(frozen=True)
class MovieLensTask:
  """Examples of one ratings log: by user (federated) and by example
  (centralized). Item ids in the examples are dense rows of `items`."""
  config: TaskConfig
  items: item_vocabulary.ItemVocabulary
  num_ratings: int
  federated_train: Examples
  federated_val: Examples
  federated_test: Examples
  centralized_train: Examples
  centralized_test: Examples

  @property
  def vocabulary_size(self) -> int:
    """Rows of the item table: the file's movies + padding."""
    return self.items.size

  def describe(self) -> Dict[str, object]:
    """The task's settings and the fingerprint of its items (for run directories)."""
    return {**self.config.describe(), **self.items.describe()}

  def split(self, name: str) -> Examples:
    """A split by its --split name (train, val, test, centralized_train,
    centralized_test), refused if empty."""
    full_name = name if name.startswith("centralized_") else f"federated_{name}"
    if full_name not in self.splits:
      raise ValueError(f"--split: unknown split '{name}'; choose one of "
                       "['centralized_test', 'centralized_train', 'test', 'train', 'val']")
    self.require_splits(full_name)
    return self.splits[full_name]

  @property
  def splits(self) -> Dict[str, Examples]:
    """Every split by its name in statistics and errors."""
    return {"federated_train": self.federated_train,
            "federated_val": self.federated_val,
            "federated_test": self.federated_test,
            "centralized_train": self.centralized_train,
            "centralized_test": self.centralized_test}

  def source(self) -> str:
    """The interactions' origin as the flags name it."""
    config = self.config
    if config.interactions_path:
      return f"--interactions_path={config.interactions_path}"
    return (f"--ratings_path={config.ratings_path}" if config.ratings_path
            else f"--synthetic={config.synthetic}")

  def empty_split_problems(self, names: Sequence[str] = ()) -> List[str]:
    """Why each of the named splits (default: all) is empty, a line each: how
    many users and ratings there are and what the split needs."""
    problems = []
    users = sum(self.splits[n].num_users
                for n in ("federated_train", "federated_val", "federated_test"))
    examples = sum(len(self.splits[n]) for n in ("centralized_train", "centralized_test"))
    for name in names or self.splits:
      if len(self.splits[name]):
        continue
      if name.startswith("federated"):
        fraction = self.config.user_split[
            ("train", "val", "test").index(name.removeprefix("federated_"))]
        need = (f"{users} users with >= --min_timeline_length="
                f"{self.config.min_timeline_length} ratings, and --user_split gives "
                f"it {fraction:g} of them: it needs at least {math.ceil(1 / fraction)} "
                "such users" if fraction else "--user_split gives it none")
      else:
        fraction = self.config.example_split[
            ("train", "test").index(name.removeprefix("centralized_"))]
        need = (f"{examples} examples, and --example_split gives it {fraction:g} of "
                f"them: it needs at least {math.ceil(1 / fraction)}" if fraction
                else "--example_split gives it none")
      problems.append(f"{self.source()}: the {name} split is empty ({self.num_ratings} "
                      f"ratings; {need})")
    return problems

  def require_splits(self, *names: str) -> None:
    """Refuses (naming the split and the cause) when a split a run needs is empty."""
    problems = self.empty_split_problems(names)
    if problems:
      raise ValueError(problems[0])

  def summary(self) -> str:
    """One line: ratings, movies and each split's users and examples."""
    splits = ", ".join(f"{name} {examples.num_users} users / {len(examples)} examples"
                       for name, examples in self.splits.items()
                       if name.startswith("federated"))
    return (f"{self.num_ratings} interactions of {self.items.num_items} items; {splits}; "
            f"centralized train / test {len(self.centralized_train)} / "
            f"{len(self.centralized_test)} examples")

  def statistics(self) -> Dict[str, object]:
    """Users and examples per split, the vocabulary size and totals."""
    splits = self.splits
    all_examples = len(self.federated_train) + len(self.federated_val) + len(
        self.federated_test)
    return {
        "source": self.config.ratings_path or f"synthetic:{self.config.synthetic}",
        "vocabulary_size": self.vocabulary_size,
        "items": self.items.num_items,
        "largest_item_id": self.items.ids[-1].item(),
        "total_ratings": self.num_ratings,
        "total_users": self.federated_train.num_users +
                       self.federated_val.num_users +
                       self.federated_test.num_users,
        "total_examples": all_examples,
        "splits": {name: {"users": examples.num_users, "examples": len(examples)}
                   for name, examples in splits.items()},
        "top_decile_movies_share_of_train_positives": top_decile_share(
            self.federated_train.labels, self.vocabulary_size),
    }


def top_decile_share(labels: np.ndarray, vocabulary_size: int) -> float:
  """The share of `labels` held by the most frequent 10% of the vocabulary's
  items (padding 0 out; at least one item): how popularity-skewed the data is,
  which is what H+S's negative term corrects."""
  counts = np.sort(np.bincount(labels, minlength=vocabulary_size)[1:])[::-1]
  top = max(1, int(np.ceil(len(counts) / 10)))
  return round(float(counts[:top].sum() / max(counts.sum(), 1)), 4)


def synthetic_ratings_path(preset_name: str, cache_dir: str) -> str:
  """Writes (once) the synthetic preset as `ratings.dat` and returns its path."""
  preset = synthetic_movielens.preset(preset_name)
  digest = hashlib.sha256(json.dumps(dataclasses.asdict(preset),
                                     sort_keys=True).encode()).hexdigest()[:12]
  directory = os.path.join(cache_dir, f"synthetic_{preset_name}_{digest}")
  path = os.path.join(directory, "ratings.dat")
  if not os.path.isfile(path):
    os.makedirs(directory, exist_ok=True)
    ratings, _ = synthetic_movielens.generate(preset)
    ratings_io.write_ratings_dat(ratings, path)
  return path


def load_interactions(config: TaskConfig
                      ) -> Tuple[pd.DataFrame, item_vocabulary.ItemVocabulary]:
  """(the events, their items as dense rows; the item vocabulary)."""
  if config.interactions_path is not None:
    return interaction_log.read_interactions(config.interactions_path,
                                             config.log_columns, config.min_rating)
  ratings = ratings_io.read_ratings(
      config.ratings_path or synthetic_ratings_path(config.synthetic, config.cache_dir))
  if config.min_rating is not None:
    ratings = ratings[ratings["rating"] >= config.min_rating]
    if not len(ratings):
      raise ratings_io.RatingsFormatError(
          f"{config.ratings_path}: no rating is >= --min_rating={config.min_rating}")
  items = item_vocabulary.ItemVocabulary.of_items(ratings["item_id"])
  return ratings.assign(item_id=items.rows(ratings["item_id"])), items


def build_task(config: TaskConfig) -> MovieLensTask:
  """Reads the interactions, numbers their items densely and builds every
  split (saying so on stderr: on a large file this takes a while)."""
  source = (config.interactions_path or config.ratings_path or
            f"the synthetic '{config.synthetic}' preset")
  print(f"MovieLens: reading {source}", file=sys.stderr, flush=True)
  ratings, items = load_interactions(config)
  examples = sequence_examples.sliding_window_examples(
      ratings, config.max_context_length, config.min_timeline_length,
      config.max_examples_per_user)
  if not len(examples):
    raise ValueError(f"No user has --min_timeline_length={config.min_timeline_length}"
                     " ratings: no examples")
  train, val, test = sequence_examples.split_by_user(
      examples, config.user_split, config.seed)
  if config.shuffle_across_users:
    train = sequence_examples.shuffle_across_users(train, config.seed)
  centralized_train, centralized_test = sequence_examples.split_by_example(
      examples, config.example_split, config.seed)
  task = MovieLensTask(config, items, len(ratings), train, val, test,
                       centralized_train, centralized_test)
  print(f"MovieLens: {task.summary()}", file=sys.stderr, flush=True)
  return task
