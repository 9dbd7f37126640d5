"""Experiments on a finished run: they train or evaluate models and pair them with the run's own, on its
held-out spec (benchmarks of speed and throughput are in `cells/bench/`).

    control.py      `python -m cells control`: the SFT-only control, GRPO's compute spent on more warm start
    raft.py         `python -m cells control --raft`: rejection-sampling SFT on the model's own successes
    drift_split.py  `python -m cells splits`: the run's models on held-out episodes of each pattern set of its split
    curve.py        `python -m cells curve`: GRPO's checkpoints on those episodes, the learning curve

They sit in the tools layer, above the steps whose outputs they read (tests/test_layers.py).
"""
