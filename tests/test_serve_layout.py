"""`python -m cells serve`'s default layout: env worker processes where the host has the cores for them (chosen
from `bench server`, docs/serving.md), the other layout one flag away."""

from __future__ import annotations

import pytest

import cells.server.app as app_module
from cells.__main__ import main


@pytest.mark.parametrize(("cpus", "workers"), [(1, 0), (2, 1), (16, 1), (None, None)])
def test_one_env_worker_from_two_cores(cpus, workers, monkeypatch):
    if cpus is None:  # unknown core count: os.cpu_count() may say None; serve stays on the event loop
        monkeypatch.setattr(app_module.os, "cpu_count", lambda: None)
        workers = 0
    assert app_module.default_env_workers(cpus) == workers


class _Built(Exception):
    pass


def test_serve_without_a_layout_takes_the_default(monkeypatch):
    seen = {}

    def build_app(stage, **kwargs):
        seen.update(kwargs)
        raise _Built

    monkeypatch.setattr(app_module, "build_app", build_app)
    monkeypatch.setattr(app_module.os, "cpu_count", lambda: 2)
    with pytest.raises(_Built):
        app_module.serve(insecure_local=True)
    assert seen["env_workers"] == 1
    with pytest.raises(_Built):
        app_module.serve(insecure_local=True, env_workers=0)
    assert seen["env_workers"] == 0


@pytest.mark.parametrize(("flags", "passed"), [([], None), (["--env-workers", "0"], 0), (["--env-workers", "2"], 2)])
def test_the_cli_passes_the_flag_or_leaves_the_choice_to_serve(flags, passed, monkeypatch):
    seen = {}
    monkeypatch.setattr(app_module, "serve", lambda host, port, stage, **kw: seen.update(kw))
    assert main(["serve", "--insecure-local", *flags]) == 0
    assert seen["env_workers"] == passed
