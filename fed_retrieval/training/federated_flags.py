"""absl flags of federated training: the loop, the algorithms, DP, the workers.

Every task family reads them through the builders below, each of which keeps
the family's default (`loop_config.LOOP_DEFAULTS`, an algorithm config's)
for every flag not given on the command line.
"""

import dataclasses
from typing import Optional

from absl import flags

from fed_retrieval.algorithms import class_neighbours
from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms import sub_model
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.algorithms.optimizers import OPTIMIZER_NAMES
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import client_sampling
from fed_retrieval.training import early_stopping
from fed_retrieval.training.run_flags import BATCH_SIZE
from fed_retrieval.training.run_flags import SEED
from fed_retrieval.training.loop_config import LOOP_DEFAULTS
from fed_retrieval.training.loop_config import LoopConfig
from losses import class_spreadout

_DP_DEFAULTS = differential_privacy.DPConfig(noise_multiplier=0.0)
_FEDAWS = FedAwSConfig()
_FEDSS = FedSSConfig()


def _family_defaults(field: str, unset: str = "None") -> str:
  """'(default: movielens 10, xc 5, pu 0)': a loop setting's default by family
  (`unset`: what a None value means)."""
  values = ((name, getattr(loop, field)) for name, loop in LOOP_DEFAULTS.items())
  return "(default: " + ", ".join(f"{name} {unset if value is None else value}"
                                   for name, value in values) + ")"


ALGORITHM = flags.DEFINE_enum(
    "algorithm", None, list(fedavg.ALGORITHMS + fedaws.ALGORITHMS + fedss.ALGORITHMS),
    "Federated algorithm: fedavg|fedsgd (MovieLens, PU; default fedavg); fedaws|"
    "positive_only|fixed_class_embeddings|softmax_oracle (--task=xc, default fedaws); "
    "fedss|neg_only|pos_only|full_softmax (FedSS: --task=xc, or MovieLens sampled "
    "global softmax).")
ALGORITHMS = flags.DEFINE_list(
    "algorithms", None,
    "A comparison's federated algorithms (--task=xc: default FedAwS's "
    f"{','.join(fedaws.ALGORITHMS)}; also {','.join(fedss.ALGORITHMS)}; MovieLens: "
    "FedSS runs of sampled global softmax added to the losses' runs, default none).")
ROUNDS = flags.DEFINE_integer(
    "rounds", None, "The cap in federated rounds (default: --max_passes).")
MAX_PASSES = flags.DEFINE_float(
    "max_passes", None, "The cap in passes: expected visits per client, rounds x "
    f"clients per round / clients {_family_defaults('max_passes')}.")
MIN_PASSES = flags.DEFINE_float(
    "min_passes", None, "The minimum budget in passes (expected visits per client): "
    f"the stopping rule ends no run before it {_family_defaults('min_passes')}.")
MIN_ROUNDS = flags.DEFINE_integer(
    "min_rounds", None, "The minimum budget in rounds: the stopping rule ends no "
    f"run before it either {_family_defaults('min_rounds')}.")
CLIENTS_PER_ROUND = flags.DEFINE_integer(
    "clients_per_round", None,
    "Clients sampled per round; with --clients_fraction, the most a round holds "
    f"{_family_defaults('clients_per_round')}.")
CLIENTS_FRACTION = flags.DEFINE_float(
    "clients_fraction", None,
    "Sample this share of the clients per round (ceil(share x clients), at most "
    "--clients_per_round); 0: --clients_per_round exactly, as when only it is "
    f"given {_family_defaults('clients_fraction')}.")
CLIENT_SAMPLING = flags.DEFINE_enum(
    "client_sampling", None, list(client_sampling.CLIENT_SAMPLINGS),
    "uniform: every client as likely (the papers' protocol). examples: a client "
    "is picked in proportion to its examples over those it trains on in a round "
    "(--max_local_steps cuts heavy clients), so every example is as likely to "
    "be trained on, as centrally; uniform without a cap.")
CLIENT_SHARDS = flags.DEFINE_integer(
    "client_shards", None,
    "Compute a round's clients in this many TFF client calls, each a shard of "
    "clients done one after another (every algorithm: the same round, far less "
    "TFF overhead per client; FedAwS and FedSS clients keep their own keys, "
    "rows and uploads); 0: one call per client, as DP runs always do "
    f"{_family_defaults('client_shards')}.")
LOCAL_EPOCHS = flags.DEFINE_integer(
    "local_epochs", None,
    f"Passes over its data a client makes per round {_family_defaults('local_epochs')}.")
MAX_LOCAL_STEPS = flags.DEFINE_integer(
    "max_local_steps", None,
    "Cap of the batches a client trains on per round: a client holding more "
    "trains on a fresh sample of them each round; 0: no cap "
    f"{_family_defaults('max_local_steps')}; MovieLens hinge losses 10.")
EVAL_EVERY = flags.DEFINE_integer(
    "eval_every", None,
    f"Evaluate on the validation split every N rounds {_family_defaults('eval_every')}.")
CHECKPOINT_EVERY = flags.DEFINE_integer(
    "checkpoint_every", None,
    f"Save the server state every N rounds {_family_defaults('checkpoint_every')}.")
PATIENCE = flags.DEFINE_integer(
    "patience", None,
    "Stop once this many validation evaluations followed the last gain, never at "
    "a new best (0: train the whole cap); the model --report_model names is reported "
    f"{_family_defaults('patience')}.")
MIN_IMPROVEMENT_SE = flags.DEFINE_float(
    "min_improvement_se", None,
    "An evaluation is a gain (--patience counts from the last) when it beats the "
    "last gain by more than this many standard errors of the difference, paired "
    "over the validation points or "
    f"users {_family_defaults('min_improvement_se')}.")
REPORT_MODEL = flags.DEFINE_enum(
    "report_model", None, list(early_stopping.REPORTED_MODELS),
    "The model a converged run reports: last_gain, its last gain beyond the noise "
    "(where --patience counts from); maximum, its highest validation value, which "
    "a curve rising in steps within the noise reaches after its last gain "
    f"{_family_defaults('report_model', unset='last_gain')}.")
SMOOTHING = flags.DEFINE_integer(
    "smoothing", None,
    "Also wait until the trailing mean of this many validation evaluations has "
    "not risen for --patience evaluations (delays a stop, never causes one) "
    f"{_family_defaults('smoothing')}.")
MAX_WORKER_RESTARTS = flags.DEFINE_integer(
    "max_worker_restarts", tff_runtime.max_worker_restarts(),
    "A TFF worker that dies during a run (a runtime crash, the out-of-memory "
    "killer) is replaced and the run resumes from its last checkpoint, this many "
    "times; then the run ends (exit 3) and a re-run resumes.")
WORKERS = flags.DEFINE_list(
    "workers", [],
    "TFF workers to train on, host:port,... (each started there with python -m "
    "scripts.worker --port=PORT): a round's clients are split across them "
    "(default: one local, private worker).")
TRUSTED_NETWORK = flags.DEFINE_bool(
    "trusted_network", False,
    "--workers on other hosts: the network between them is private (their "
    "gRPC port has no encryption or authentication).")

CLIENT_OPTIMIZER = flags.DEFINE_enum("client_optimizer", None, list(OPTIMIZER_NAMES),
                                     "FedAvg client optimizer (default sgd).")
CLIENT_LEARNING_RATE = flags.DEFINE_float(
    "client_learning_rate", None,
    "Client learning rate (default: the algorithm's on the family: MovieLens "
    "softmax losses 0.1, hinge losses 4.0; FedAwS "
    f"{_FEDAWS.client_learning_rate}; FedSS {_FEDSS.client_learning_rate}; PU 0.05).")
SERVER_OPTIMIZER = flags.DEFINE_enum(
    "server_optimizer", None, list(OPTIMIZER_NAMES),
    "Server optimizer (default adam; PU: sgd).")
SERVER_LEARNING_RATE = flags.DEFINE_float(
    "server_learning_rate", None,
    f"Server learning rate (default: MovieLens 0.05; FedAwS "
    f"{_FEDAWS.server_learning_rate}; FedSS {_FEDSS.server_learning_rate}; PU 1.0).")
SERVER_LEARNING_RATE_HALF_LIFE = flags.DEFINE_float(
    "server_learning_rate_half_life", None,
    "FedAvg, FedSGD: halve the server learning rate every this many rounds "
    "(rate * 0.5 ** (round / half life)); 0, the default: a constant rate.")
SERVER_EPSILON = flags.DEFINE_float(
    "server_epsilon", None,
    "FedAvg, FedSGD: epsilon of an adaptive server optimizer (adam, adagrad, "
    "yogi), added to the root of its squared updates (default: MovieLens 1e-4; "
    "otherwise TFF's, 1e-7 for adam).")
CLIENT_JIT_COMPILE = flags.DEFINE_bool(
    "client_jit_compile", None,
    "FedAvg, FedSGD: compile each client batch's step with XLA (shards of clients "
    "only). Off: on this CPU it made no loss's rounds faster once full batches had "
    "static shapes (global softmax FedAvg 1.2-1.4x slower on ml1m, 1.1-1.6x on "
    "ml-latest-small).")
NOISE_MULTIPLIER = flags.DEFINE_float(
    "noise_multiplier", None,
    "Client-level DP (FedAvg, FedSGD: MovieLens, PU; XC, a fixed clip: the "
    "dense tower of FedAwS/FedSS, the whole model of full softmax and the "
    "oracle): Gaussian noise of this times the clip "
    "on the sum of the clipped client updates, clients sampled by Poisson, "
    "epsilon reported every round (none: no DP).")
CLIP_NORM = flags.DEFINE_float(
    "clip_norm", _DP_DEFAULTS.clip_norm,
    "DP: the L2 norm each client update is clipped to (adaptive: where it starts).")
DP_CLIPPING = flags.DEFINE_enum(
    "dp_clipping", _DP_DEFAULTS.clipping, list(differential_privacy.CLIPPINGS),
    "DP: a fixed clip, or one adapted each round to the median update norm "
    "(FedAvg, FedSGD).")
TARGET_DELTA = flags.DEFINE_float(
    "target_delta", _DP_DEFAULTS.target_delta,
    "DP: the delta at which epsilon is reported.")
NUM_NEGATIVES = flags.DEFINE_integer(
    "num_negatives", None,
    "FedSS: negative classes (items) each client samples uniformly per round "
    f"(default: {_FEDSS.negative_fraction:.0%} of the classes).")
LOG_Q = flags.DEFINE_bool(
    "log_q", None,
    "FedSS: subtract log(sampling probability) from the negatives' logits "
    f"(default: xc {'on' if _FEDSS.log_q else 'off'}, movielens off; --nolog_q: off).")
ROW_MEAN = flags.DEFINE_enum(
    "row_mean", None, list(sub_model.ROW_MEANS),
    "FedSS: a class row's update is the mean over the clients that held it "
    "(holders) or FedAvg's example-weighted mean over every client of the round "
    f"(clients) (default: xc {_FEDSS.row_mean}, movielens holders).")
ROW_LEARNING_RATE = flags.DEFINE_float(
    "row_learning_rate", None,
    "FedSS: the server's rate on a class row's mean delta (FedAvg's: 1) "
    f"(default: xc {_FEDSS.row_learning_rate:g}, movielens 1).")
HINGE_MARGIN = flags.DEFINE_float(
    "hinge_margin", _FEDAWS.hinge_margin,
    "FedAwS: the cosine margin of its clients' positive squared hinge.")
SPREADOUT = flags.DEFINE_enum(
    "spreadout", _FEDAWS.spreadout, list(class_spreadout.SPREADOUT_MODES),
    "FedAwS server step: topk (each updated class against its k nearest, eq. 8) or "
    "all (against every class, to margin --spreadout_margin, eq. 7).")
SPREADOUT_K = flags.DEFINE_integer("spreadout_k", _FEDAWS.spreadout_k,
                                   "FedAwS: nearest classes per updated class (topk).")
SPREADOUT_LAMBDA = flags.DEFINE_float(
    "spreadout_lambda", _FEDAWS.spreadout_lambda,
    "FedAwS: learning-rate multiplier of the server spreadout step (lambda).")
SPREADOUT_MARGIN = flags.DEFINE_float(
    "spreadout_margin", _FEDAWS.spreadout_margin,
    "FedAwS --spreadout=all: the distance nu classes are pushed to.")
SPREADOUT_SEARCH = flags.DEFINE_enum(
    "spreadout_search", _FEDAWS.spreadout_search, list(class_neighbours.SEARCHES),
    "FedAwS --spreadout=topk: how each updated class's nearest classes are "
    "found: exact (every class scored, O(updated x classes) a round), "
    "approximate (an inverted file kept across rounds, ~sqrt(classes) a query; "
    "its recall stated by scripts.benchmark_round_cost; on Delicious FedAwS's "
    "P@1 was within 0.1 of exact's).")
SPREADOUT_SHARDS = flags.DEFINE_list(
    "spreadout_shards", [],
    "FedAwS --spreadout_search=approximate: keep the index's lists on these "
    "shards, host:port,... (each started there with python -m "
    "scripts.spreadout_shard --port=PORT, beside a worker), which search and move "
    "the rows; the server step's machine only merges their answers (default: the "
    "index on this machine).")

TABLE_SERVERS = flags.DEFINE_list(
    "table_servers", [],
    "FedSS: the class table in ranges on these servers, host:port,... (python -m "
    "scripts.table_server --port=PORT beside each worker); default: here.")

# What --help lists (`scripts.cli.run(help_groups=...)`): (title, the --task
# it serves or None for all, flags).
LOOP_FLAGS = ("Federated training", None, (
    ALGORITHM, ALGORITHMS, ROUNDS, MAX_PASSES, MIN_PASSES, MIN_ROUNDS, CLIENTS_PER_ROUND,
    CLIENTS_FRACTION, CLIENT_SAMPLING, CLIENT_SHARDS, LOCAL_EPOCHS, MAX_LOCAL_STEPS,
    CLIENT_LEARNING_RATE, SERVER_OPTIMIZER, SERVER_LEARNING_RATE, EVAL_EVERY,
    CHECKPOINT_EVERY, PATIENCE, MIN_IMPROVEMENT_SE, REPORT_MODEL, SMOOTHING,
    MAX_WORKER_RESTARTS,
    WORKERS, TRUSTED_NETWORK))
FEDAVG_FLAGS = ("FedAvg and FedSGD", ("movielens", "pu"), (
    CLIENT_OPTIMIZER, SERVER_LEARNING_RATE_HALF_LIFE, SERVER_EPSILON, CLIENT_JIT_COMPILE))
DP_FLAGS = ("Client-level differential privacy", None, (
    NOISE_MULTIPLIER, CLIP_NORM, DP_CLIPPING, TARGET_DELTA))
FEDSS_FLAGS = ("FedSS (--algorithm=fedss and its baselines)", ("movielens", "xc"),
               (NUM_NEGATIVES, LOG_Q, ROW_MEAN, ROW_LEARNING_RATE))
FEDAWS_FLAGS = ("FedAwS", "xc", (HINGE_MARGIN, SPREADOUT, SPREADOUT_K, SPREADOUT_LAMBDA,
                                 SPREADOUT_MARGIN, SPREADOUT_SEARCH, SPREADOUT_SHARDS))
ALL_FLAGS = (LOOP_FLAGS, FEDAVG_FLAGS, DP_FLAGS, FEDSS_FLAGS, FEDAWS_FLAGS)
# One run's (`scripts.train_federated`): FedSS's table servers too, which a
# comparison's FedAwS runs cannot use.
ONE_RUN_FLAGS = (LOOP_FLAGS, FEDAVG_FLAGS, DP_FLAGS,
                 FEDSS_FLAGS[:2] + (FEDSS_FLAGS[2] + (TABLE_SERVERS,),), FEDAWS_FLAGS)


def given(holder: flags.FlagHolder, default):
  """The flag's value when given on the command line, else `default`."""
  return holder.value if flags.FLAGS[holder.name].present else default


def _given_fields(config, holders) -> dict:
  """{field: flag value} for each flag of `holders` given on the command line
  (a flag's name is its config field's)."""
  return {h.name: h.value for h in holders
          if flags.FLAGS[h.name].present and hasattr(config, h.name)}


def loop_from_flags(defaults: LoopConfig) -> LoopConfig:
  """The family's loop (`defaults`) with the loop flags given; --max_local_steps
  0 means no cap."""
  changes = _given_fields(defaults, (
      ROUNDS, MAX_PASSES, MIN_PASSES, MIN_ROUNDS, CLIENTS_PER_ROUND, CLIENTS_FRACTION,
      CLIENT_SAMPLING, CLIENT_SHARDS, LOCAL_EPOCHS, MAX_LOCAL_STEPS, BATCH_SIZE,
      EVAL_EVERY, CHECKPOINT_EVERY, PATIENCE, MIN_IMPROVEMENT_SE, REPORT_MODEL, SMOOTHING,
      SEED))
  if changes.get("max_local_steps") == 0:
    changes["max_local_steps"] = None
  if changes.get("clients_fraction") == 0 or (
      "clients_per_round" in changes and "clients_fraction" not in changes):
    changes["clients_fraction"] = None  # A count given alone is the count.
  return dataclasses.replace(defaults, **changes)


def dp_from_flags() -> Optional[differential_privacy.DPConfig]:
  """The DP the flags ask for (None without --noise_multiplier)."""
  if NOISE_MULTIPLIER.value is None:
    return None
  if flags.FLAGS[CLIENT_SHARDS.name].present and CLIENT_SHARDS.value:
    raise ValueError("--client_shards: a DP run clips each client's update, so it "
                     "trains one TFF client per client")
  return differential_privacy.DPConfig(
      noise_multiplier=NOISE_MULTIPLIER.value, clip_norm=CLIP_NORM.value,
      clipping=DP_CLIPPING.value, target_delta=TARGET_DELTA.value)


def dp_configs_from_flags(noise_multipliers) -> list:
  """A DP config per noise multiplier given (strings of a list flag), with the
  other DP flags' settings."""
  try:
    values = [float(z) for z in noise_multipliers]
  except ValueError as e:
    raise ValueError(f"--noise_multipliers: {e}") from e
  return [differential_privacy.DPConfig(
      noise_multiplier=z, clip_norm=CLIP_NORM.value, clipping=DP_CLIPPING.value,
      target_delta=TARGET_DELTA.value) for z in values]


_OPTIMIZATION = (CLIENT_LEARNING_RATE, SERVER_OPTIMIZER, SERVER_LEARNING_RATE)


def fedavg_from_flags(defaults: fedavg.FedAvgConfig) -> fedavg.FedAvgConfig:
  """The family's FedAvg (`defaults`) with the FedAvg and DP flags given."""
  changes = _given_fields(defaults, (*_OPTIMIZATION, CLIENT_OPTIMIZER,
                                     SERVER_LEARNING_RATE_HALF_LIFE, SERVER_EPSILON,
                                     CLIENT_JIT_COMPILE))
  return dataclasses.replace(defaults, dp=dp_from_flags(), **changes)


def refuse_fedavg_only_flags(algorithms: str) -> None:
  """The flags only FedAvg and FedSGD read are refused for `algorithms`, not
  ignored."""
  for flag in FEDAVG_FLAGS[2]:
    if flags.FLAGS[flag.name].present:
      raise ValueError(f"--{flag.name} is for FedAvg and FedSGD (MovieLens, PU), "
                       f"not {algorithms}")


def fedss_from_flags(defaults: FedSSConfig = _FEDSS) -> FedSSConfig:
  """FedSS's settings (`defaults`) with the FedSS and optimization flags given."""
  return dataclasses.replace(defaults, **_given_fields(
      defaults, (*_OPTIMIZATION, NUM_NEGATIVES, LOG_Q, ROW_MEAN,
                 ROW_LEARNING_RATE)))


def fedaws_from_flags(defaults: FedAwSConfig = _FEDAWS) -> FedAwSConfig:
  """FedAwS's settings (`defaults`) with the FedAwS and optimization flags given."""
  return dataclasses.replace(defaults, **_given_fields(
      defaults, (*_OPTIMIZATION, HINGE_MARGIN, SPREADOUT, SPREADOUT_K, SPREADOUT_LAMBDA,
                 SPREADOUT_MARGIN, SPREADOUT_SEARCH)))
