"""NumPy's seeding of many generators at once, to the bit.

A federated round shuffles each of its clients' examples with a generator of
its own: client i of round r draws from
`np.random.default_rng(SeedSequence([seed, r, i]).generate_state(1)[0])`.
In NumPy each `SeedSequence` costs ~7 us and each `default_rng` ~8 us, 1.9-2.4
ms for a round of 100 clients (one-off timing): ~5% of a batch-softmax round,
spent in Python while the TFF worker waits. Here the same hashes run as array
operations over all of a round's clients: `SeedSequence`'s entropy mixing and
output (an algorithm NumPy keeps fixed, NEP 19), then PCG64's seeding from its
output, and one generator takes each client's state in turn. The values are
NumPy's own (`tests/test_seed_sequences.py` compares them).
"""

from typing import Iterator, Optional, Sequence

import numpy as np

_INIT_A = 0x43B0D7E5
_MULT_A = 0x931E8875
_INIT_B = 0x8B51F9DD
_MULT_B = 0x58F38DED
_MIX_MULT_L = 0xCA01F9DD
_MIX_MULT_R = 0x4973F715
_XSHIFT = 16
_POOL_SIZE = 4
_MASK32 = 0xFFFFFFFF
_MASK128 = (1 << 128) - 1
_PCG64_MULTIPLIER = (2549297995355413924 << 64) + 4865540595714422341


def _int_words(value: int) -> list:
  """A non-negative int as SeedSequence reads it: 32-bit words, lowest first."""
  if value < 0:
    raise ValueError(f"seeds must be non-negative, got {value}")
  words = [value & _MASK32]
  value >>= 32
  while value:
    words.append(value & _MASK32)
    value >>= 32
  return words


class _HashConstant:
  """SeedSequence's running hash constant (the same for every row)."""

  def __init__(self, initial: int, multiplier: int):
    self._value = initial
    self._multiplier = multiplier

  def mix_in(self, values: np.ndarray) -> np.ndarray:
    """`values` hashed with the constant, which then moves on."""
    values = values ^ np.uint32(self._value)
    self._value = (self._value * self._multiplier) & _MASK32
    values = values * np.uint32(self._value)
    return values ^ (values >> np.uint32(_XSHIFT))


def _mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
  result = np.uint32(_MIX_MULT_L) * x - np.uint32(_MIX_MULT_R) * y
  return result ^ (result >> np.uint32(_XSHIFT))


def generate_states(entropy: np.ndarray, words: int) -> np.ndarray:
  """[n, words] uint32: row k is `SeedSequence(entropy[k]).generate_state(words)`
  for entropy rows of uint32 words ([n, m], as `_int_words` gives them)."""
  entropy = np.asarray(entropy, np.uint32)
  with np.errstate(over="ignore"):  # uint32 arithmetic wraps, as in C.
    hashing = _HashConstant(_INIT_A, _MULT_A)
    zeros = np.zeros(len(entropy), np.uint32)
    pool = [hashing.mix_in(entropy[:, i] if i < entropy.shape[1] else zeros)
            for i in range(_POOL_SIZE)]
    for source in range(_POOL_SIZE):
      for target in range(_POOL_SIZE):
        if source != target:
          pool[target] = _mix(pool[target], hashing.mix_in(pool[source]))
    for source in range(_POOL_SIZE, entropy.shape[1]):
      for target in range(_POOL_SIZE):
        pool[target] = _mix(pool[target], hashing.mix_in(entropy[:, source]))
    output = _HashConstant(_INIT_B, _MULT_B)
    return np.stack([output.mix_in(pool[i % _POOL_SIZE]) for i in range(words)], axis=1)


def spawned_seeds(prefix: Sequence[int], count: int) -> np.ndarray:
  """[count] uint32: `SeedSequence([*prefix, i]).generate_state(1)[0]` for
  i in 0..count-1."""
  head = [word for value in prefix for word in _int_words(value)]
  entropy = np.empty((count, len(head) + 1), np.uint32)
  entropy[:, :-1] = head
  entropy[:, -1] = np.arange(count)  # One word each (count < 2 ** 32).
  return generate_states(entropy, 1)[:, 0]


def generators(seeds: Sequence[Optional[int]]) -> Iterator[Optional[np.random.Generator]]:
  """For each seed, a generator in the state of `np.random.default_rng(seed)`
  (None for None). It is one generator set anew at each step: draw from each
  before taking the next."""
  given = [seed for seed in seeds if seed is not None]
  if any(not 0 <= seed <= _MASK32 for seed in given):
    raise ValueError(f"generators() takes seeds in [0, 2 ** 32), got {seeds}")
  entropy = np.array(given, np.uint32).reshape(-1, 1)  # One word each.
  # PCG64 seeds from 4 uint64 words: (state high, low, increment high, low).
  states = generate_states(entropy, 8).astype("<u4").view("<u8")
  bit_generator = np.random.PCG64(0)
  generator = np.random.Generator(bit_generator)
  rows = iter(states)
  for seed in seeds:
    if seed is None:
      yield None
      continue
    words = [int(word) for word in next(rows)]
    initial_state = (words[0] << 64) | words[1]
    increment = ((((words[2] << 64) | words[3]) << 1) | 1) & _MASK128
    # pcg64_srandom_r: a step from state 0 (to `increment`), the seed added, a step.
    state = ((increment + initial_state) * _PCG64_MULTIPLIER + increment) & _MASK128
    bit_generator.state = {"bit_generator": "PCG64",
                           "state": {"state": state, "inc": increment},
                           "has_uint32": 0, "uinteger": 0}
    yield generator
