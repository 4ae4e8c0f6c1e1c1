"""The model flags as a script reads them (in a child process: absl's flags are global)."""

import dataclasses

import pytest

from losses import registry
from tasks.movielens import flags as model_flags
from tests import flag_child


def resolve():
  """Each spreadout loss's spreadout as the parsed flags build it (in the child)."""
  return {loss: dataclasses.asdict(
      model_flags.objective_config_from_flags(loss).build().spreadout)
          for loss in ("hinge_spreadout", "batch_softmax_spreadout")}


resolved_spreadout = flag_child.FlagChild("tests.test_movielens_flags:resolve")


@pytest.mark.parametrize("argv,hinge,batch", [
    ((), {"item": 0.1, "negative": 0.1, "negative_margin": 0.5},
     {"item": 0.1, "negative": 0.0}),
    (("--spreadout_weight=0.3",), {"item": 0.3, "negative": 0.1},
     {"item": 0.3, "negative": 0.0}),
    (("--negative_spreadout_weight=0.2", "--negative_margin=0.3"),
     {"item": 0.1, "negative": 0.2, "negative_margin": 0.3},
     {"item": 0.1, "negative": 0.2, "negative_margin": 0.3}),
])
def test_spreadout_flags_keep_each_losss_negative_default(argv, hinge, batch):
  """Flags that leave --negative_spreadout_weight unset give H+S its negative
  term and BS + spreadout none; a weight given applies to both."""
  assert registry.DEFAULT_NEGATIVE_SPREADOUT_WEIGHTS["hinge_spreadout"] == 0.1
  spreadout = resolved_spreadout(*argv)
  for loss, expected in (("hinge_spreadout", hinge), ("batch_softmax_spreadout", batch)):
    assert {key: spreadout[loss][key] for key in expected} == pytest.approx(expected)
