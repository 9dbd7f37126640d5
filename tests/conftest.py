"""Shared pytest setup: CPU only, offline, no tokenizer thread storms on 2 cores."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# pytest-xdist runs one worker per core, and each worker's torch (and every pipeline it launches in a subprocess or
# a Jupyter kernel, which inherit this) would otherwise start a thread per core too: on 2 cores that is 4+ busy
# threads spinning against each other (the learning check took 113 s in the suite, 18 s with one thread each).
_XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _XDIST_WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _XDIST_WORKERS)))


def pytest_collection_modifyitems(items):
    """Tests marked `slow` (whole pipeline runs, real training) first, in their collection order: pytest-xdist then
    starts them while both workers are free, instead of one worker starting a several-minute test when the other
    has nothing left to take."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
