"""Deterministic randomness shared by vendors, drift and tasks (see the comment below), and the episode seed
ranges: training, probe and held-out evaluation seeds never overlap (`SEED_RANGES`)."""

from __future__ import annotations

import _random
import hashlib
import random
from dataclasses import dataclass
from typing import Any

from cells.codec import canonical_json
from cells.errors import DriftCallError


class SeedRangeError(DriftCallError, ValueError):
    """A seed index past the end of its range."""


@dataclass(frozen=True)
class SeedRange:
    """A half-open range of episode seeds reserved for one purpose."""

    name: str
    start: int
    stop: int

    def __contains__(self, seed: object) -> bool:
        return isinstance(seed, int) and self.start <= seed < self.stop

    def seed(self, index: int) -> int:
        """The `index`-th seed of the range; raises if the range is exhausted."""
        if not 0 <= index < self.stop - self.start:
            raise SeedRangeError(f"seed index {index} outside {self.name} range of size {self.stop - self.start}")
        return self.start + index


# The one place seed ranges are defined: the task generator draws every goal from a seed, and a model is never
# trained or probed on a seed it is evaluated on.
TRAIN_SEEDS = SeedRange("train", 0, 800_000_000)
PROBE_SEEDS = SeedRange("probe", 800_000_000, 900_000_000)
EVAL_SEEDS = SeedRange("eval", 900_000_000, 1_000_000_000)
SEED_RANGES: tuple[SeedRange, ...] = (TRAIN_SEEDS, PROBE_SEEDS, EVAL_SEEDS)

# ---------------------------------------------------------------------------------------------
# Deterministic randomness shared by vendors, drift and tasks. Python's hash() is salted per
# process, and global RNGs leak state between episodes, so every decision derives its own
# generator from blake2b over canonical JSON of (seed, tag, ...).
# ---------------------------------------------------------------------------------------------


def stable_digest(*parts: Any, size: int = 8) -> bytes:
    """blake2b digest of the canonical JSON of `parts`; identical in every process."""
    return hashlib.blake2b(canonical_json(list(parts)).encode("utf-8"), digest_size=size).digest()


def stable_int(*parts: Any) -> int:
    """A 64-bit unsigned integer derived from `parts` (see `stable_digest`)."""
    return int.from_bytes(stable_digest(*parts), "big")


def rng_for(*parts: Any) -> random.Random:
    """A private `random.Random` seeded from `parts`, e.g. `rng_for(seed, "airline.listings", query)`."""
    return seeded_random(stable_int(*parts))


def seeded_random(seed: int) -> random.Random:
    """`random.Random(seed)` for a non-negative int, in the same state, without the two Python-level wrappers
    (`__init__`, then `seed`) around the C seeding: a fifth of the cost of each of the ~25 generators an
    episode's reset and tools derive (tests/test_step_04_datatypes.py checks the states are equal)."""
    rng = _NEW_RANDOM(random.Random)
    _C_SEED(rng, seed)
    rng.gauss_next = None  # type: ignore[attr-defined]  # what Random.seed sets after seeding (typeshed omits it)
    return rng


_NEW_RANDOM = random.Random.__new__  # allocates; seeding is __init__'s job for the Python subclass
_C_SEED = _random.Random.seed  # the C seeding random.Random.seed calls for an int


def stable_id(prefix: str, *parts: Any, length: int = 8) -> str:
    """A readable deterministic id like `BK-3f9a1c0e`."""
    return f"{prefix}-{stable_digest(*parts, size=16).hex()[:length]}"
