"""A loop's budget in passes and its clients per round, as a count or a share."""

import dataclasses

import pytest

from fed_retrieval.training.loop_config import LoopConfig


def test_a_share_of_the_clients_becomes_a_count_capped_by_clients_per_round():
  loop = LoopConfig(clients_per_round=4000, clients_fraction=0.3)
  assert loop.for_clients(941).clients_per_round == 283  # ceil(282.3)
  assert loop.for_clients(159).clients_per_round == 48  # ceil(47.7)
  assert loop.for_clients(1).clients_per_round == 1
  assert loop.for_clients(20_000).clients_per_round == 4000
  assert loop.for_clients(941).clients_fraction is None
  fixed = LoopConfig(clients_per_round=100)
  assert fixed.for_clients(941) is fixed


def test_the_budget_is_in_passes_over_the_clients():
  loop = LoopConfig(clients_per_round=4000, clients_fraction=0.3, max_passes=100.0,
                    min_passes=5.0).for_clients(941)
  # 283 of 941 clients a round: a pass is 941 / 283 = 3.33 rounds.
  assert loop.round_budget(941) == (333, 17)
  assert loop.passes(333, 941) == pytest.approx(333 * 283 / 941)
  assert LoopConfig(clients_per_round=100, max_passes=2.0, min_passes=1.0).round_budget(50) == (2, 1)
  assert LoopConfig(rounds=7).round_budget(50)[0] == 7


def test_the_minimum_is_the_larger_of_passes_and_rounds_within_the_cap():
  # 488 clients, 100 a round: a pass is 4.88 rounds.
  loop = LoopConfig(clients_per_round=100, max_passes=60.0, min_passes=1.0, min_rounds=250)
  assert loop.round_budget(488) == (293, 250)
  # On ten times the clients the passes' minimum is the larger.
  assert dataclasses.replace(loop, min_passes=6.0).round_budget(4880) == (2928, 293)
  assert LoopConfig(rounds=40, min_rounds=250).round_budget(488) == (40, 40)


def test_a_negative_minimum_in_rounds_is_refused():
  with pytest.raises(ValueError, match="--min_rounds must be >= 0"):
    LoopConfig(min_rounds=-1)


@pytest.mark.parametrize("share", [0.0, 1.5, -0.1])
def test_a_share_outside_zero_one_is_refused(share):
  with pytest.raises(ValueError, match="--clients_fraction must be in"):
    LoopConfig(clients_fraction=share)
