"""One progress bar for every long phase (episode generation, evaluation, the probe): tqdm's `auto`
flavour, so a terminal gets a text bar and a notebook a widget, both with a rate and an ETA.
Training bars come from the HF trainers themselves (see `cells/training/stage_bars.py`)."""

from __future__ import annotations

from typing import Any


def progress_bar(total: int, desc: str, unit: str = "ep", enabled: bool = True, leave: bool = True) -> Any:
    """A tqdm bar over `total` items; `enabled=False` gives a silent one with the same API, `leave=False`
    one that disappears when done (for a phase inside a longer one)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, leave=leave, dynamic_ncols=True)
