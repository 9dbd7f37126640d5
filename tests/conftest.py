"""Shared pytest setup: CPU only, offline, no tokenizer thread storms on 2 cores."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def pytest_collection_modifyitems(items):
    """Tests marked `slow` (whole pipeline runs, real training) first, in their collection order: pytest-xdist then
    starts them while both workers are free, instead of one worker starting a several-minute test when the other
    has nothing left to take."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
