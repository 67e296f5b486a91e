"""java.util.Random, bit for bit: Beam's NEXMark generator draws every field from it.

Beam seeds one `java.util.Random` per event with the event id, so reproducing its 48-bit LCG (and
the exact bounded-int, double and int algorithms) lets this generator derive its fields the same
way, and makes a fresh RNG per event cheap (seeding is one XOR, not a Mersenne-twister setup).
"""

from __future__ import annotations

_MULT = 0x5DEECE66D
_ADD = 0xB
_MASK = (1 << 48) - 1
_INT_MAX = (1 << 31) - 1


class JavaRandom:
    """The subset of `java.util.Random` the generator uses, with Java's exact output."""

    __slots__ = ("_seed",)

    def __init__(self, seed: int) -> None:
        self._seed = (seed ^ _MULT) & _MASK

    def _next(self, bits: int) -> int:
        s = (self._seed * _MULT + _ADD) & _MASK
        self._seed = s
        r = s >> (48 - bits)
        if bits == 32 and r >= 1 << 31:  # Java returns a signed int
            r -= 1 << 32
        return r

    def next_int(self, bound: int | None = None) -> int:
        """`nextInt()` (a signed 32-bit int) or `nextInt(bound)` in [0, bound)."""
        if bound is None:
            return self._next(32)
        if bound <= 0 or bound > _INT_MAX:
            raise ValueError(f"bound must be in [1, 2^31-1], got {bound}")
        s = (self._seed * _MULT + _ADD) & _MASK
        r = s >> 17
        m = bound - 1
        if bound & m == 0:
            self._seed = s
            return (bound * r) >> 31
        u = r
        r = u % bound
        while u - r + m > _INT_MAX:  # Java: int overflow of u - r + m means "reject"
            s = (s * _MULT + _ADD) & _MASK
            u = s >> 17
            r = u % bound
        self._seed = s
        return r

    def next_ints(self, count: int) -> list[int]:
        """`count` successive `nextInt()` values (one loop instead of `count` calls: the padding's hot path)."""
        s = self._seed
        out = []
        for _ in range(count):
            s = (s * _MULT + _ADD) & _MASK
            r = s >> 16
            out.append(r - (1 << 32) if r >= 1 << 31 else r)
        self._seed = s
        return out

    def next_double(self) -> float:
        """`nextDouble()`: 53 random bits in [0, 1)."""
        return ((self._next(26) << 27) + self._next(27)) * (1.0 / (1 << 53))
