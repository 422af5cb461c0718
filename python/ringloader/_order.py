"""The epoch's shuffle as a keyed bijection of [0, n), evaluated where it
is needed, so no permutation array of n entries ever exists.

:class:`Shuffle` maps positions in an epoch's order to the sample indices
there. It is a balanced Feistel network over the smallest power of two
with an even number of bits that holds n (so the domain is below 4n), its
round keys drawn from (seed, epoch, n) by numpy's SeedSequence, its round
function the splitmix64 finaliser, a 64-bit mix whose every output bit
depends on every input bit. A Feistel network is a permutation of its
domain whatever its round function; positions that land at or beyond n
are encrypted again until they fall inside ("cycle-walking"), which keeps
the map a permutation of [0, n) itself. Each call takes an array of
positions (a batch) and costs a few dozen numpy passes over it: memory is
O(batch), not O(n), and any position is reached directly, which is what
lets a resumed epoch start at its batch without replaying the ones before.

Everything is integer arithmetic on uint64 (wrapping multiplication,
shifts, xor), so the order is the same on every CPU and platform.
"""

from __future__ import annotations

import numpy as np

# Rounds of the Feistel network: 4 already make a pseudo-random permutation
# of a good round function (Luby-Rackoff); 6 leave a margin for a domain
# as small as 4 elements, where each half is a single bit.
ROUNDS = 6

_U64 = np.uint64


def _mix(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of each element of x (uint64, wrapping)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


class Shuffle:
    """The order of one epoch over ``n`` samples: ``shuffle(positions)``
    is the sample at each position (an int64 array), a function of
    (seed, epoch, n) alone; :meth:`inverse` is the position of each
    sample. Positions must lie in [0, n)."""

    def __init__(self, n: int, seed: int, epoch: int) -> None:
        if n < 0:
            raise ValueError(f"a shuffle of {n} samples")
        self.n = int(n)
        bits = max(2, (max(self.n - 1, 1)).bit_length())
        bits += bits & 1  # balanced: both halves have bits // 2 bits
        self._half = _U64(bits // 2)
        self._mask = _U64((1 << (bits // 2)) - 1)
        words = [seed & (2**64 - 1), epoch & (2**64 - 1), self.n, 0x5EED0F0DE4]
        self._keys = [
            _U64(k)
            for k in np.random.SeedSequence(words).generate_state(ROUNDS, np.uint64)
        ]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for k in self._keys:
            left, right = right, left ^ (_mix(right ^ k) & self._mask)
        return (left << self._half) | right

    def _decrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        for k in reversed(self._keys):
            left, right = right ^ (_mix(left ^ k) & self._mask), left
        return (left << self._half) | right

    def _walk(self, positions: np.ndarray, step) -> np.ndarray:
        x = np.asarray(positions, dtype=np.int64)
        if x.size and (x.min() < 0 or x.max() >= self.n):
            raise IndexError(f"a position outside [0, {self.n})")
        y = step(x.astype(np.uint64))
        out = y >= _U64(self.n)
        while out.any():  # cycle-walking: at most a few steps on average
            y[out] = step(y[out])
            out = y >= _U64(self.n)
        return y.astype(np.int64)

    def __call__(self, positions: np.ndarray) -> np.ndarray:
        return self._walk(positions, self._encrypt)

    def inverse(self, samples: np.ndarray) -> np.ndarray:
        return self._walk(samples, self._decrypt)
