"""seed_sequences: NumPy's SeedSequence and default_rng seeding, vectorized, equal to NumPy's."""

import numpy as np
import pytest

from tasks import seed_sequences


@pytest.mark.parametrize("prefix", [(0, 1), (7, 123), (2 ** 40 + 5, 3), (0, 0), (12345,)])
def test_spawned_seeds_are_numpys_seed_sequence_outputs(prefix):
  got = seed_sequences.spawned_seeds(prefix, 40)
  want = [np.random.SeedSequence(list(prefix) + [i]).generate_state(1)[0] for i in range(40)]
  np.testing.assert_array_equal(got, want)
  assert got.dtype == np.uint32


def test_generate_states_for_entropy_longer_than_the_pool():
  entropy = np.random.default_rng(0).integers(0, 2 ** 32, size=(6, 7), dtype=np.uint64)
  got = seed_sequences.generate_states(entropy.astype(np.uint32), 5)
  for row, state in zip(entropy, got):
    np.testing.assert_array_equal(
        state, np.random.SeedSequence([int(w) for w in row]).generate_state(5))


def test_generators_are_in_default_rngs_state_and_draw_the_same():
  seeds = [0, 1, 2 ** 32 - 1, None] + [int(s) for s in seed_sequences.spawned_seeds((3, 9), 20)]
  for seed, generator in zip(seeds, seed_sequences.generators(seeds)):
    if seed is None:
      assert generator is None
      continue
    reference = np.random.default_rng(seed)
    assert generator.bit_generator.state == reference.bit_generator.state
    np.testing.assert_array_equal(generator.permutation(57), reference.permutation(57))
    np.testing.assert_array_equal(generator.permutation(5), reference.permutation(5))


def test_generators_refuse_seeds_of_more_than_one_word():
  with pytest.raises(ValueError, match=r"seeds in \[0, 2 \*\* 32\)"):
    list(seed_sequences.generators([2 ** 32]))
