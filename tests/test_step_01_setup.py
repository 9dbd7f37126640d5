import json

from cells.pipeline import make_context
from cells.step_01_setup import RuntimeInfo, default_profile_name, detect_runtime, package_versions, run


def _info(**kw):
    base = dict(on_colab=False, device="cpu", gpu_name=None, gpu_memory_gb=None, bf16_supported=False,
                python="3.11", versions=(), git_sha=None)
    base.update(kw)
    return RuntimeInfo(**base)


def test_detect_runtime_on_this_cpu_machine():
    info = detect_runtime()
    assert info.device == "cpu" and info.gpu_name is None
    assert info.version_of("trl") == "1.16.0"
    assert not info.on_colab


def test_default_profile_follows_hardware():
    assert default_profile_name(_info()) == "cpu-smoke"
    assert default_profile_name(_info(device="cuda", gpu_memory_gb=15.0)) == "colab-t4"
    assert default_profile_name(_info(device="cuda", gpu_memory_gb=80.0, bf16_supported=True)) == "colab-a100"
    # a big GPU without bf16 (V100-class) still gets the fp16 T4 recipe
    assert default_profile_name(_info(device="cuda", gpu_memory_gb=32.0)) == "colab-t4"


def test_package_versions_skips_missing():
    found = dict(package_versions(("trl", "definitely-not-installed-pkg")))
    assert "trl" in found and "definitely-not-installed-pkg" not in found


def test_run_creates_run_dir_and_seeds(tmp_path):
    import random

    ctx = make_context("cpu-smoke", tmp_path / "r")
    ctx = run(ctx)
    assert (tmp_path / "r" / "runtime.json").is_file()
    assert json.loads((tmp_path / "r" / "runtime.json").read_text())["device"] == "cpu"
    first = random.random()
    run(ctx)
    assert random.random() == first  # reseeded identically
