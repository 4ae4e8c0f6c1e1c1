"""The absl flags every task family shares: which family, and the data's seed."""

from absl import flags

TASK = flags.DEFINE_string(
    "task", "movielens",
    "The task family (tasks/registry.py): movielens (next-movie retrieval, clients "
    "= users), xc (extreme classification, clients = label partitions: FedAwS, "
    "FedSS) or pu (image classification from clients with positive and unlabeled "
    "data: FedPU).")
DATA_SEED = flags.DEFINE_integer(
    "data_seed", 0, "Seed of the data (splits, partitions, drawn labels).")

TASK_FLAGS = ("Task", None, (TASK,))
