"""absl flags of federated training, shared by train_federated, compare and benchmark."""

from typing import Optional

from absl import flags

from fed_retrieval.algorithms import differential_privacy
from fed_retrieval.algorithms import fedavg
from fed_retrieval.algorithms import fedaws
from fed_retrieval.algorithms import fedss
from fed_retrieval.algorithms import sub_model
from fed_retrieval.algorithms.fedaws import FedAwSConfig
from fed_retrieval.algorithms.fedss import FedSSConfig
from fed_retrieval.algorithms.optimizers import OPTIMIZER_NAMES
from fed_retrieval.models import model_flags
from fed_retrieval.runtime import tff_runtime
from fed_retrieval.training import client_sampling
from fed_retrieval.training import federated_loop
from fed_retrieval.training import pu_training
from fed_retrieval.training import xc_training
from fed_retrieval.training.federated_loop import FederatedConfig
from losses import class_spreadout
from losses import pu_risk

_DEFAULTS = FederatedConfig()
_DP_DEFAULTS = differential_privacy.DPConfig(noise_multiplier=0.0)
_XC_DEFAULTS = FedAwSConfig()
_FEDSS_DEFAULTS = FedSSConfig()
_PU_DEFAULTS = pu_training.PUFederatedConfig()
_XC_LOOP_DEFAULTS = xc_training.XCFederatedConfig()
ALGORITHM = flags.DEFINE_enum(
    "algorithm", None, list(fedavg.ALGORITHMS + fedaws.ALGORITHMS + fedss.ALGORITHMS),
    "Federated algorithm: fedavg|fedsgd (MovieLens, default fedavg); fedaws|"
    "positive_only|fixed_class_embeddings|softmax_oracle (--task=xc, default fedaws); "
    "fedss|neg_only|pos_only|full_softmax (FedSS: --task=xc, or MovieLens sampled "
    "global softmax).")
NUM_NEGATIVES = flags.DEFINE_integer(
    "num_negatives", None,
    "FedSS: negative classes (items) each client samples uniformly per round "
    f"(default: {_FEDSS_DEFAULTS.negative_fraction:.0%} of the classes).")
LOG_Q = flags.DEFINE_bool(
    "log_q", _FEDSS_DEFAULTS.log_q,
    "FedSS: subtract log(sampling probability) from the negatives' logits.")
MAX_WORKER_RESTARTS = flags.DEFINE_integer(
    "max_worker_restarts", tff_runtime.max_worker_restarts(),
    "A TFF worker that dies during a run (a runtime crash, the out-of-memory "
    "killer) is replaced and the run resumes from its last checkpoint, this many "
    "times; then the run ends (exit 3) and a re-run resumes.")
ROW_MEAN = flags.DEFINE_enum(
    "row_mean", _FEDSS_DEFAULTS.row_mean, list(sub_model.ROW_MEANS),
    "FedSS: a class row's update is the mean over the clients that held it "
    "(holders) or FedAvg's example-weighted mean over every client of the round "
    "(clients).")
WORKERS = flags.DEFINE_list(
    "workers", [],
    "TFF workers to train on, host:port,... (each started there with python -m "
    "scripts.worker --port=PORT): a round's clients are split across them "
    "(default: one local, private worker).")
TRUSTED_NETWORK = flags.DEFINE_bool(
    "trusted_network", False,
    "--workers on other hosts: the network between them is private (their "
    "gRPC port has no encryption or authentication).")
ROUNDS = flags.DEFINE_integer(
    "rounds", None, "The cap in federated rounds (default: --max_passes).")
MAX_PASSES = flags.DEFINE_float(
    "max_passes", None,
    "The cap in passes: expected visits per client, rounds x clients per round / "
    f"clients (default {_DEFAULTS.max_passes:g}; XC: {_XC_LOOP_DEFAULTS.max_passes:g}; "
    f"PU: {_PU_DEFAULTS.federated.max_passes:g}).")
MIN_PASSES = flags.DEFINE_float(
    "min_passes", None,
    "The minimum budget in passes (expected visits per client): the stopping rule "
    f"ends no run before it (default {_DEFAULTS.min_passes:g}; XC: "
    f"{_XC_LOOP_DEFAULTS.min_passes:g}).")
CLIENTS_PER_ROUND = flags.DEFINE_integer("clients_per_round",
                                         _DEFAULTS.clients_per_round,
                                         "Clients sampled per round.")
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
    f"(default {_DEFAULTS.client_shards}).")
CLIENT_JIT_COMPILE = flags.DEFINE_bool(
    "client_jit_compile", False,
    "Compile each client batch's step with XLA (shards of clients only). Off: "
    "on this CPU it made no loss's rounds faster once full batches had static "
    "shapes (global softmax FedAvg 1.2-1.4x slower on ml1m, 1.1-1.6x on ml-latest-small).")
LOCAL_EPOCHS = flags.DEFINE_integer("local_epochs", _DEFAULTS.local_epochs,
                                    "Passes over its data a client makes per round.")
MAX_LOCAL_STEPS = flags.DEFINE_integer(
    "max_local_steps", None,
    "Cap of the batches a client trains on per round: a client holding more "
    "trains on a fresh sample of them each round; 0: no cap (default: MovieLens "
    f"{_DEFAULTS.max_local_steps}, XC and PU no cap).")
CLIENT_OPTIMIZER = flags.DEFINE_enum("client_optimizer", _DEFAULTS.client_optimizer,
                                     list(OPTIMIZER_NAMES), "FedAvg client optimizer.")
CLIENT_LEARNING_RATE = flags.DEFINE_float(
    "client_learning_rate", None,
    "Client learning rate (default: MovieLens softmax losses "
    f"{federated_loop.SOFTMAX_CLIENT_LEARNING_RATE}, hinge losses "
    f"{federated_loop.HINGE_CLIENT_LEARNING_RATE}; FedAwS: "
    f"{_XC_DEFAULTS.client_learning_rate}; FedSS: "
    f"{_FEDSS_DEFAULTS.client_learning_rate}).")
SERVER_OPTIMIZER = flags.DEFINE_enum(
    "server_optimizer", None, list(OPTIMIZER_NAMES),
    f"Server optimizer (default {_DEFAULTS.server_optimizer}; FedAwS: "
    f"{_XC_DEFAULTS.server_optimizer}; FedSS: {_FEDSS_DEFAULTS.server_optimizer}).")
SERVER_LEARNING_RATE = flags.DEFINE_float(
    "server_learning_rate", None,
    f"Server learning rate (default {_DEFAULTS.server_learning_rate}; FedAwS: "
    f"{_XC_DEFAULTS.server_learning_rate}; FedSS: "
    f"{_FEDSS_DEFAULTS.server_learning_rate}).")
SERVER_LEARNING_RATE_HALF_LIFE = flags.DEFINE_float(
    "server_learning_rate_half_life", None,
    "MovieLens, PU: halve the server learning rate every this many rounds "
    "(rate * 0.5 ** (round / half life)); 0, the default: a constant rate.")
SERVER_EPSILON = flags.DEFINE_float(
    "server_epsilon", None,
    "MovieLens, PU: epsilon of an adaptive server optimizer (adam, adagrad, "
    "yogi), added to the root of its squared updates (default: MovieLens "
    f"{federated_loop.SERVER_EPSILON}; otherwise TFF's, 1e-7 for adam).")
NOISE_MULTIPLIER = flags.DEFINE_float(
    "noise_multiplier", None,
    "Client-level DP (FedAvg, FedSGD: MovieLens, PU, the XC oracle; the dense "
    "tower of FedAwS/FedSS, fixed clip): Gaussian noise of this times the clip "
    "on the sum of the clipped client updates, clients sampled by Poisson, "
    "epsilon reported every round (none: no DP).")
CLIP_NORM = flags.DEFINE_float(
    "clip_norm", _DP_DEFAULTS.clip_norm,
    "DP: the L2 norm each client update is clipped to (adaptive: where it starts).")
DP_CLIPPING = flags.DEFINE_enum(
    "dp_clipping", _DP_DEFAULTS.clipping, list(differential_privacy.CLIPPINGS),
    "DP: a fixed clip, or one adapted each round to the median update norm.")
TARGET_DELTA = flags.DEFINE_float(
    "target_delta", _DP_DEFAULTS.target_delta,
    "DP: the delta at which epsilon is reported.")
SPREADOUT = flags.DEFINE_enum(
    "spreadout", _XC_DEFAULTS.spreadout, list(class_spreadout.SPREADOUT_MODES),
    "FedAwS server step: topk (each updated class against its k nearest, eq. 8) or "
    "all (against every class, to margin --spreadout_margin, eq. 7).")
SPREADOUT_K = flags.DEFINE_integer("spreadout_k", _XC_DEFAULTS.spreadout_k,
                                   "FedAwS: nearest classes per updated class (topk).")
SPREADOUT_LAMBDA = flags.DEFINE_float(
    "spreadout_lambda", _XC_DEFAULTS.spreadout_lambda,
    "FedAwS: learning-rate multiplier of the server spreadout step (lambda).")
SPREADOUT_MARGIN = flags.DEFINE_float(
    "spreadout_margin", _XC_DEFAULTS.spreadout_margin,
    "FedAwS --spreadout=all: the distance nu classes are pushed to.")
XC_ARCHITECTURE = flags.DEFINE_enum(
    "xc_architecture", _XC_LOOP_DEFAULTS.architecture, list(xc_training.ARCHITECTURES),
    "XC model: linear (a 256-dim embedding bag, no dense layer), residual (the "
    "bag plus a 512 ReLU layer added back to it), small (64-dim bag, 128 hidden, "
    "64-dim output) or paper (512, 1024-1024, 512).")
XC_BAG = flags.DEFINE_enum(
    "xc_bag", _XC_LOOP_DEFAULTS.bag, list(fedaws.BAGS),
    "XC, FedAwS/FedSS and their sub-model baselines: a client receives only the "
    "embedding-bag rows of its features (selected) or the whole bag (whole, the "
    "contrast). The oracles always send the whole model.")
LOGIT_SCALE = flags.DEFINE_float("logit_scale", _XC_LOOP_DEFAULTS.logit_scale,
                                 "XC: logits are this times the cosine.")
PU_SURROGATE = flags.DEFINE_enum(
    "pu_surrogate", _PU_DEFAULTS.surrogate, list(pu_risk.SURROGATES),
    "PU: surrogate of the negative classes' risk estimate: probability (1 - p, "
    "bounded) or cross_entropy (-log p).")
NON_NEGATIVE = flags.DEFINE_bool(
    "non_negative", _PU_DEFAULTS.non_negative,
    "PU: non-negative correction of the negative classes' risk estimate (nnPU).")
CONV_FILTERS = flags.DEFINE_list(
    "conv_filters", [str(f) for f in _PU_DEFAULTS.conv_filters],
    "PU image classifier: filters of each 3x3 convolution.")
DENSE_UNITS = flags.DEFINE_integer("dense_units", _PU_DEFAULTS.dense_units,
                                   "PU image classifier: units of the dense layer.")
EVAL_EVERY = flags.DEFINE_integer("eval_every", _DEFAULTS.eval_every,
                                  "Evaluate on the validation users every N rounds.")
CHECKPOINT_EVERY = flags.DEFINE_integer("checkpoint_every", _DEFAULTS.checkpoint_every,
                                        "Save the server state every N rounds.")
PATIENCE = flags.DEFINE_integer(
    "patience", None,
    "Stop once this many validation evaluations followed the best one, never at "
    "a new best (0: train the whole cap); the best evaluated model is reported "
    f"(default {_DEFAULTS.patience}; XC: {_XC_LOOP_DEFAULTS.patience}; PU: "
    f"{_PU_DEFAULTS.federated.patience}, its fixed budget).")
SMOOTHING = flags.DEFINE_integer(
    "smoothing", None,
    "Also wait until the trailing mean of this many validation evaluations has "
    "not risen for --patience evaluations (delays a stop, never causes one; "
    f"default {_DEFAULTS.smoothing}).")
MIN_IMPROVEMENT_SE = flags.DEFINE_float(
    "min_improvement_se", _DEFAULTS.min_improvement_se,
    "An evaluation becomes the best when it beats the best by more than this many "
    "standard errors of the difference, paired over the validation points or users.")


# What --help lists (`scripts.cli.run(help_groups=...)`).
FEDERATED_FLAGS = ("Federated training", None, (
    ALGORITHM, ROUNDS, MAX_PASSES, MIN_PASSES, CLIENTS_PER_ROUND, CLIENT_SAMPLING,
    CLIENT_SHARDS, LOCAL_EPOCHS, MAX_LOCAL_STEPS, CLIENT_OPTIMIZER, CLIENT_LEARNING_RATE,
    SERVER_OPTIMIZER, SERVER_LEARNING_RATE, EVAL_EVERY, CHECKPOINT_EVERY, PATIENCE,
    MIN_IMPROVEMENT_SE, SMOOTHING, MAX_WORKER_RESTARTS, WORKERS, TRUSTED_NETWORK))
FEDAVG_FLAGS = ("FedAvg and FedSGD", ("movielens", "pu"), (
    SERVER_LEARNING_RATE_HALF_LIFE, SERVER_EPSILON, CLIENT_JIT_COMPILE))
DP_FLAGS = ("Client-level differential privacy (FedAvg, FedSGD)", None, (
    NOISE_MULTIPLIER, CLIP_NORM, DP_CLIPPING, TARGET_DELTA))
FEDSS_FLAGS = ("FedSS (--algorithm=fedss and its baselines)", None, (NUM_NEGATIVES, LOG_Q, ROW_MEAN))
XC_MODEL_FLAGS = ("FedAwS and the XC model", "xc", (
    model_flags.MARGIN, SPREADOUT, SPREADOUT_K, SPREADOUT_LAMBDA, SPREADOUT_MARGIN,
    XC_ARCHITECTURE, XC_BAG, LOGIT_SCALE))
PU_MODEL_FLAGS = ("FedPU and the image model", "pu", (
    PU_SURROGATE, NON_NEGATIVE, CONV_FILTERS, DENSE_UNITS))
ALL_FLAGS = (FEDERATED_FLAGS, FEDAVG_FLAGS, DP_FLAGS, FEDSS_FLAGS, XC_MODEL_FLAGS,
             PU_MODEL_FLAGS)


def federated_config_from_flags(loss: str) -> FederatedConfig:
  """The MovieLens run the flags describe. With a FedSS --algorithm (sampled
  global softmax), the loop's settings: its algorithm field stays FedAvg's."""
  algorithm = ALGORITHM.value or _DEFAULTS.algorithm
  return FederatedConfig(
      objective=model_flags.objective_config_from_flags(loss),
      algorithm=_DEFAULTS.algorithm if algorithm in fedss.ALGORITHMS else algorithm,
      **_budget_from_flags(_DEFAULTS),
      clients_per_round=CLIENTS_PER_ROUND.value, local_epochs=LOCAL_EPOCHS.value,
      max_local_steps=_max_local_steps(_DEFAULTS.max_local_steps),
      client_sampling=CLIENT_SAMPLING.value,
      client_shards=_or(CLIENT_SHARDS.value, _DEFAULTS.client_shards),
      client_jit_compile=CLIENT_JIT_COMPILE.value,
      batch_size=model_flags.BATCH_SIZE.value,
      client_optimizer=CLIENT_OPTIMIZER.value,
      client_learning_rate=CLIENT_LEARNING_RATE.value,
      server_optimizer=_or(SERVER_OPTIMIZER.value, _DEFAULTS.server_optimizer),
      server_learning_rate=_or(SERVER_LEARNING_RATE.value,
                               _DEFAULTS.server_learning_rate),
      server_learning_rate_half_life=_or(SERVER_LEARNING_RATE_HALF_LIFE.value,
                                         _DEFAULTS.server_learning_rate_half_life),
      server_epsilon=_or(SERVER_EPSILON.value, _DEFAULTS.server_epsilon),
      dp=dp_config_from_flags(),
      eval_every=EVAL_EVERY.value, checkpoint_every=CHECKPOINT_EVERY.value,
      patience=_or(PATIENCE.value, _DEFAULTS.patience),
      min_improvement_se=MIN_IMPROVEMENT_SE.value,
      smoothing=_or(SMOOTHING.value, _DEFAULTS.smoothing),
      seed=model_flags.SEED.value, ks=model_flags.ks_from_flag())


def dp_config_from_flags() -> Optional[differential_privacy.DPConfig]:
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


def _or(value, default):
  return default if value is None else value


def _max_local_steps(default):
  """--max_local_steps, 0 meaning no cap; `default` when not given."""
  value = _or(MAX_LOCAL_STEPS.value, default)
  return None if value == 0 else value


def _budget_from_flags(defaults) -> dict:
  """--rounds, --max_passes and --min_passes, with `defaults`' where unset."""
  return dict(rounds=ROUNDS.value, max_passes=_or(MAX_PASSES.value, defaults.max_passes),
              min_passes=_or(MIN_PASSES.value, defaults.min_passes))


def _optimization_from_flags(defaults) -> dict:
  """The client and server optimization flags, with `defaults`' where unset."""
  return dict(
      client_learning_rate=_or(CLIENT_LEARNING_RATE.value, defaults.client_learning_rate),
      server_optimizer=_or(SERVER_OPTIMIZER.value, defaults.server_optimizer),
      server_learning_rate=_or(SERVER_LEARNING_RATE.value, defaults.server_learning_rate))


def refuse_fedavg_only_flags(algorithms: str) -> None:
  """The flags only FedAvg and FedSGD read (their server optimizer, their
  clients' XLA step) are refused for `algorithms`, not ignored."""
  for flag in (SERVER_EPSILON, SERVER_LEARNING_RATE_HALF_LIFE, CLIENT_JIT_COMPILE):
    if flags.FLAGS[flag.name].present:
      raise ValueError(f"--{flag.name} is for FedAvg and FedSGD (MovieLens, PU), "
                       f"not {algorithms}")


def fedss_config_from_flags(algorithm: str = "fedss") -> FedSSConfig:
  return FedSSConfig(algorithm=algorithm, num_negatives=NUM_NEGATIVES.value,
                     log_q=LOG_Q.value, row_mean=ROW_MEAN.value,
                     **_optimization_from_flags(_FEDSS_DEFAULTS))


def xc_federated_config_from_flags() -> xc_training.XCFederatedConfig:
  """The XC run the flags describe (both families' settings; --algorithm picks)."""
  refuse_fedavg_only_flags("the XC algorithms")
  fedaws_config = FedAwSConfig(
      hinge_margin=_or(model_flags.MARGIN.value, _XC_DEFAULTS.hinge_margin),
      spreadout=SPREADOUT.value,
      spreadout_k=SPREADOUT_K.value, spreadout_lambda=SPREADOUT_LAMBDA.value,
      spreadout_margin=SPREADOUT_MARGIN.value, **_optimization_from_flags(_XC_DEFAULTS))
  return xc_training.XCFederatedConfig(
      algorithm=ALGORITHM.value or _XC_DEFAULTS.algorithm, fedaws=fedaws_config,
      fedss=fedss_config_from_flags(), architecture=XC_ARCHITECTURE.value,
      bag=XC_BAG.value,
      logit_scale=LOGIT_SCALE.value, **_budget_from_flags(_XC_LOOP_DEFAULTS),
      clients_per_round=CLIENTS_PER_ROUND.value, local_epochs=LOCAL_EPOCHS.value,
      max_local_steps=_max_local_steps(_XC_LOOP_DEFAULTS.max_local_steps),
      client_sampling=CLIENT_SAMPLING.value,
      client_shards=_or(CLIENT_SHARDS.value, _XC_LOOP_DEFAULTS.client_shards),
      batch_size=model_flags.BATCH_SIZE.value, eval_every=EVAL_EVERY.value,
      checkpoint_every=CHECKPOINT_EVERY.value,
      patience=_or(PATIENCE.value, _XC_LOOP_DEFAULTS.patience),
      min_improvement_se=MIN_IMPROVEMENT_SE.value,
      smoothing=_or(SMOOTHING.value, _XC_LOOP_DEFAULTS.smoothing),
      seed=model_flags.SEED.value, dp=dp_config_from_flags())


def given(holder, default):
  """The flag's value when given on the command line, else the family's default."""
  return holder.value if flags.FLAGS[holder.name].present else default


def pu_federated_config_from_flags(method: str = "fedpu"
                                   ) -> pu_training.PUFederatedConfig:
  """The PU run the flags describe; loop flags not given keep the PU defaults."""
  loop = _PU_DEFAULTS.federated
  try:
    conv_filters = tuple(int(f) for f in CONV_FILTERS.value)
  except ValueError as e:
    raise ValueError(f"--conv_filters: {e}") from e
  federated = FederatedConfig(
      algorithm=ALGORITHM.value or loop.algorithm,  # fedavg or fedsgd (appendix B)
      **_budget_from_flags(loop),
      clients_per_round=given(CLIENTS_PER_ROUND, loop.clients_per_round),
      local_epochs=given(LOCAL_EPOCHS, loop.local_epochs),
      max_local_steps=_max_local_steps(loop.max_local_steps),
      client_sampling=given(CLIENT_SAMPLING, loop.client_sampling),
      client_shards=_or(CLIENT_SHARDS.value, loop.client_shards),
      client_jit_compile=given(CLIENT_JIT_COMPILE, loop.client_jit_compile),
      batch_size=given(model_flags.BATCH_SIZE, loop.batch_size),
      client_optimizer=given(CLIENT_OPTIMIZER, loop.client_optimizer),
      **_optimization_from_flags(loop),
      server_learning_rate_half_life=_or(SERVER_LEARNING_RATE_HALF_LIFE.value,
                                         loop.server_learning_rate_half_life),
      server_epsilon=_or(SERVER_EPSILON.value, loop.server_epsilon),
      dp=dp_config_from_flags(),
      eval_every=given(EVAL_EVERY, loop.eval_every),
      checkpoint_every=given(CHECKPOINT_EVERY, loop.checkpoint_every),
      patience=given(PATIENCE, loop.patience),
      min_improvement_se=MIN_IMPROVEMENT_SE.value,
      smoothing=_or(SMOOTHING.value, loop.smoothing), seed=model_flags.SEED.value)
  local_work_given = any(flags.FLAGS[h.name].present
                         for h in (model_flags.BATCH_SIZE, LOCAL_EPOCHS))
  return pu_training.PUFederatedConfig(
      method=method, surrogate=PU_SURROGATE.value, non_negative=NON_NEGATIVE.value,
      conv_filters=conv_filters, dense_units=DENSE_UNITS.value, federated=federated,
      size_local_work=not local_work_given)
