"""Deterministic randomness shared by vendors, drift and tasks (see the comment below)."""

from __future__ import annotations

import hashlib
import random
from typing import Any

from cells.datamodel.codec import canonical_json

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
    return random.Random(stable_int(*parts))


def stable_id(prefix: str, *parts: Any, length: int = 8) -> str:
    """A readable deterministic id like `BK-3f9a1c0e`."""
    return f"{prefix}-{stable_digest(*parts, size=16).hex()[:length]}"
