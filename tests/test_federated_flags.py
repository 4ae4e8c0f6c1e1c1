"""The federated flags as the scripts read them (in a child process: absl's flags are global)."""

import dataclasses

from absl import flags
import pytest

from tasks import registry
from tasks.movielens.settings import FEDSS_DEFAULTS
from tasks.movielens.settings import HINGE_CLIENT_LEARNING_RATE
from tasks.movielens.settings import HINGE_MAX_LOCAL_STEPS
from tasks.xc.settings import XCSettings
from tests import flag_child

# Which loss's FedAvg a MovieLens resolution builds (`resolve`).
flags.DEFINE_string("resolve_loss", "global_softmax", "The loss `resolve` builds FedAvg for.")


def resolve():
  """The family's settings of the parsed flags (in `flag_child`'s child); with
  --resolve_loss, MovieLens's FedAvg of that loss as its job builds it."""
  family = registry.from_flags()
  settings = family.settings_from_flags()
  if family.name == "movielens":  # FedAvg of the loss, as its job builds it.
    fedavg = settings.fedavg_for(flags.FLAGS.resolve_loss)
    loop = settings.loop_for(flags.FLAGS.resolve_loss)
    fedavg.check_loop(loop)
    return {**dataclasses.asdict(fedavg), **dataclasses.asdict(loop),
            "fedss": dataclasses.asdict(settings.fedss)}
  if isinstance(settings, XCSettings):  # What the one run checks first.
    settings.check(settings.algorithm)
  return dataclasses.asdict(settings)


_CHILD = flag_child.FlagChild("tests.test_federated_flags:resolve")


def resolved(*argv):
  """The family's settings the flags give (on the small presets' data)."""
  data = {"--task=xc": "--synthetic_xc=xc_tiny", "--task=pu": "--pu_data=digits"}
  argv = [next((d for t, d in data.items() if t in argv), "--synthetic=small"), *argv]
  return _CHILD(*argv)


def resolved_loss(loss, *argv):
  """A MovieLens run of `loss` as its process trains it (`resolved`)."""
  return resolved(f"--resolve_loss={loss}", *argv)


def test_movielens_defaults_and_flags():
  config = resolved()
  assert (config["server_epsilon"], config["client_shards"], config["client_sampling"]) == (
      1e-4, 2, None)
  assert config["server_learning_rate_half_life"] == 0  # A constant rate.
  config = resolved("--server_epsilon=1e-3", "--client_shards=0",
                    "--client_sampling=examples", "--server_learning_rate_half_life=50")
  assert (config["server_epsilon"], config["client_shards"], config["client_sampling"],
          config["server_learning_rate_half_life"]) == (1e-3, 0, "examples", 50)
  assert resolved("--server_learning_rate_half_life=-1")["error"].startswith(
      "--server_learning_rate_half_life must be >= 0")


def test_the_help_gives_the_movielens_defaults():
  # Written in the help of flags every family shares; the values live in the
  # MovieLens settings.
  assert (f"hinge losses {HINGE_MAX_LOCAL_STEPS}."
          in flags.FLAGS["max_local_steps"].help)
  assert (f"hinge losses {HINGE_CLIENT_LEARNING_RATE}"
          in flags.FLAGS["client_learning_rate"].help)
  assert (f"movielens {'on' if FEDSS_DEFAULTS.log_q else 'off'};"
          in flags.FLAGS["log_q"].help)


def test_movielens_hinge_clients_take_fewer_batches_unless_a_cap_is_given():
  assert resolved()["max_local_steps"] == 20  # Global softmax: the loop's.
  assert resolved_loss("batch_softmax_spreadout")["max_local_steps"] == 20
  assert resolved_loss("hinge_spreadout")["max_local_steps"] == 10
  assert resolved_loss("hinge_spreadout", "--max_local_steps=20")["max_local_steps"] == 20
  assert resolved_loss("hinge_spreadout", "--max_local_steps=0")["max_local_steps"] is None


@pytest.mark.parametrize("args,expected", [
    ((), False),  # Global softmax, in shards: XLA no longer pays.
    (("--loss=hinge_spreadout",), False), (("--loss=batch_softmax",), False),
    (("--client_jit_compile",), True),
    (("--loss=hinge_spreadout", "--client_jit_compile"), True)])
def test_movielens_clients_compile_their_step_only_when_told(args, expected):
  loss = [a.split("=")[1] for a in args if a.startswith("--loss=")] or ["global_softmax"]
  config = resolved_loss(loss[0], *[a for a in args if not a.startswith("--loss=")])
  assert config["client_jit_compile"] is expected


def test_xla_needs_shards_of_clients():
  for args in (("--client_shards=0",), ("--noise_multiplier=1",)):
    assert resolved_loss("global_softmax", "--client_jit_compile", *args)[
        "error"].startswith("--client_jit_compile: only shards of clients")


def test_the_stopping_rule_reaches_the_centralized_references():
  config = resolved("--task=xc", "--report_model=maximum", "--patience=3")
  for loop in (config["loop"], config["centralized"]):
    assert (loop["report_model"], loop["patience"]) == ("maximum", 3)
  assert resolved("--task=xc")["centralized"]["report_model"] is None  # last_gain
  assert resolved()["report_model"] == "maximum"  # MovieLens's default.
  assert resolved("--report_model=last_gain")["report_model"] == "last_gain"


def test_pu_keeps_its_loop_and_sizes_local_work_unless_given():
  config = resolved("--task=pu")
  assert config["fedavg"]["server_epsilon"] is None  # Server SGD.
  assert config["fedavg"]["server_optimizer"] == "sgd"
  assert (config["loop"]["clients_per_round"], config["loop"]["patience"]) == (10, 0)
  assert config["size_local_work"]
  assert not resolved("--task=pu", "--batch_size=32")["size_local_work"]
  assert not resolved("--task=pu", "--local_epochs=2")["size_local_work"]
  assert not config["fedavg"]["client_jit_compile"]  # XLA slowed its CNN.


@pytest.mark.parametrize("flag", ["--server_epsilon=1e-3",
                                  "--server_learning_rate_half_life=50",
                                  "--client_jit_compile"])
def test_xc_refuses_what_its_algorithms_do_not_take(flag):
  assert resolved("--task=xc", flag)["error"].startswith(flag.split("=")[0])


def test_xc_shards_its_clients_unless_private():
  assert resolved("--task=xc")["loop"]["client_shards"] == 2
  assert resolved("--task=xc", "--client_shards=0")["loop"]["client_shards"] == 0
  assert resolved("--task=xc", "--client_shards=3", "--noise_multiplier=1",
                  "--xc_bag=whole")["error"].startswith("--client_shards: a DP run")


def test_xc_takes_dp_with_a_fixed_clip_only():
  config = resolved("--task=xc", "--noise_multiplier=1", "--clip_norm=0.2",
                    "--xc_bag=whole")
  assert (config["dp"]["noise_multiplier"], config["dp"]["clip_norm"]) == (1.0, 0.2)
  assert resolved("--task=xc", "--noise_multiplier=1", "--dp_clipping=adaptive",
                  "--xc_bag=whole")[
      "error"].startswith("--dp_clipping=adaptive: --algorithm=fedaws clips at a fixed")
  # The linear tower with a selected bag has no dense weight for DP to cover.
  assert resolved("--task=xc", "--noise_multiplier=1")["error"].startswith(
      "--noise_multiplier: with --xc_architecture=linear and --xc_bag=selected")
  assert resolved("--task=xc", "--noise_multiplier=1", "--xc_architecture=small")["dp"]
  assert resolved("--task=xc", "--algorithm=softmax_oracle", "--noise_multiplier=1",
                  "--dp_clipping=adaptive")["error"].startswith(
      "--dp_clipping=adaptive: --algorithm=softmax_oracle clips at a fixed")


def test_xc_samples_a_share_of_its_clients_unless_given_a_count():
  loop = resolved("--task=xc")["loop"]
  assert (loop["clients_fraction"], loop["clients_per_round"]) == (0.3, 4000)
  loop = resolved("--task=xc", "--clients_per_round=7")["loop"]
  assert (loop["clients_fraction"], loop["clients_per_round"]) == (None, 7)
  loop = resolved("--task=xc", "--clients_fraction=0")["loop"]
  assert loop["clients_fraction"] is None
  loop = resolved("--clients_fraction=0.5", "--clients_per_round=20")  # MovieLens.
  assert (loop["clients_fraction"], loop["clients_per_round"]) == (0.5, 20)
  assert resolved("--task=xc", "--clients_fraction=1.5")["error"].startswith(
      "--clients_fraction must be in (0, 1]")


def test_fedss_rows_average_over_the_rounds_clients_in_xc_and_their_holders_in_movielens():
  assert resolved("--task=xc")["fedss"]["row_mean"] == "clients"
  assert resolved()["fedss"]["row_mean"] == "holders"
  assert resolved("--row_mean=clients")["fedss"]["row_mean"] == "clients"
  assert resolved("--task=xc", "--row_mean=holders")["fedss"]["row_mean"] == "holders"


def test_fedss_corrects_its_logits_for_sampling_in_xc_and_not_in_movielens():
  assert resolved("--task=xc")["fedss"]["log_q"] is True
  assert resolved()["fedss"]["log_q"] is False
  assert resolved("--task=xc", "--nolog_q")["fedss"]["log_q"] is False
  assert resolved("--log_q")["fedss"]["log_q"] is True


def test_xc_reference_towers_default_to_the_residual_and_are_checked():
  assert resolved("--task=xc")["reference_architectures"] == ["residual"]
  assert resolved("--task=xc", "--xc_reference_architectures=")[
      "reference_architectures"] == []
  assert resolved("--task=xc", "--xc_reference_architectures=small,paper")[
      "reference_architectures"] == ["small", "paper"]
  assert resolved("--task=xc", "--xc_reference_architectures=deep")["error"].startswith(
      "--xc_reference_architectures must be one of linear, residual, small, paper, "
      "got 'deep'")


def test_xc_dot_product_scoring_is_for_fedss_family_only():
  assert resolved("--task=xc")["scoring"] is None  # Cosines.
  assert resolved("--task=xc", "--xc_scoring=dot", "--algorithm=fedss")["scoring"] == "dot"
  assert resolved("--task=xc", "--xc_scoring=dot", "--algorithm=softmax_oracle")[
      "scoring"] == "dot"
  assert resolved("--task=xc", "--xc_scoring=dot")["error"].startswith(
      "--xc_scoring=dot: --algorithm=fedaws trains on cosines")
