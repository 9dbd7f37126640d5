"""Layers point one way: data model -> world (vendors, drift, tasks) -> rewards -> env (with its action
grammar) -> agent (policies, prompt, rollout) -> training and evaluation. Every import under cells/,
lazy ones inside functions included, goes to the same layer or a lower one; orchestration (the
pipeline, the CLI, benchmarks) sits on top. A new module must be placed in a layer here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS: tuple[tuple[str, str], ...] = (
    ("model", r"cells\.(step_0[1-4]_\w+|progress|errors|distributed|datamodel)(\..+)?"),
    ("world", r"cells\.(step_0[5-7]_\w+|vendors|tasks)(\..+)?"),
    ("rewards", r"cells\.(step_08_\w+|rewards)(\..+)?"),
    ("env", r"cells\.(step_09_\w+|step_10_\w+|actions|openenv_env|server)(\..+)?"),
    ("agent", r"cells\.(step_11_\w+|agent)(\..+)?"),
    ("training/evaluation", r"cells\.(step_(1[2-9]|2\d)_\w+|modeling|training|evaluation)(\..+)?"),
)
ORCHESTRATION = re.compile(
    r"cells(\.(pipeline|__main__|bench|bench_server|bench_voice|reloading|results|control|diagnose))?$")


def layer_of(module: str) -> int | None:
    for index, (_, pattern) in enumerate(LAYERS):
        if re.fullmatch(pattern, module):
            return index
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(source: str, module: str, is_package: bool = False) -> list[tuple[str, int]]:
    """(imported module or module.name, line) for every import in `source`, however deeply nested."""
    package = module if is_package else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            out += [(base, node.lineno)] + [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return [(name, line) for name, line in out if name.startswith("cells.")]


def imports_of(path: Path) -> list[tuple[str, int]]:
    return imports_in(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")


SOURCES = sorted((ROOT / "cells").rglob("*.py"))


def test_every_module_has_a_layer():
    unplaced = [module_name(p) for p in SOURCES if layer_of(module_name(p)) is None
                and not ORCHESTRATION.fullmatch(module_name(p))]
    assert unplaced == [], f"place these modules in a layer in tests/test_layers.py: {unplaced}"


@pytest.mark.parametrize("path", [p for p in SOURCES if not ORCHESTRATION.fullmatch(module_name(p))],
                         ids=lambda p: module_name(p))
def test_imports_never_point_up(path: Path):
    mine = layer_of(module_name(path))
    upward = [f"line {line}: {name} ({LAYERS[theirs][0]})" for name, line in imports_of(path)
              if (theirs := layer_of(name)) is not None and mine is not None and theirs > mine]
    assert upward == [], f"{module_name(path)} ({LAYERS[mine][0]}) imports from a higher layer: {upward}"


def test_the_checker_sees_lazy_and_relative_upward_imports():
    """An import hidden inside a function, or written relative, is found all the same."""
    lazy = imports_in("def f():\n    from cells.step_11_agent import ExpertPolicy\n", "cells.vendors.x")
    relative = imports_in("from ..agent.policies import base\n", "cells.rewards.x")
    assert ("cells.step_11_agent", 2) in lazy and ("cells.agent.policies", 1) in relative
    assert layer_of("cells.step_11_agent") > layer_of("cells.vendors.x")
    assert layer_of("cells.agent.policies") > layer_of("cells.rewards.x")


# ---------------------------------------------------------------------------------------------- one fact, one home
def _language_lists(path: Path, languages: set[str]) -> list[int]:
    """Lines declaring the language list itself: a tuple/list/set of exactly those codes, or a dict over
    exactly those keys with one value for all (weights). Per-language tables (scripts, phrases) are data."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_literals = {id(n.slice) for n in ast.walk(tree)
                       if isinstance(n, ast.Subscript) and getattr(n.value, "id", None) == "Literal"}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and id(node) not in typing_literals:
            codes = [e.value for e in node.elts if isinstance(e, ast.Constant)]
            if len(codes) == len(node.elts) and set(codes) == languages:
                lines.append(node.lineno)
        elif isinstance(node, ast.Dict) and node.keys:
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            values = {ast.dump(v) for v in node.values}
            if keys == languages and len(values) == 1:
                lines.append(node.lineno)
    return lines


def test_the_language_list_is_declared_once():
    """Only step 2 spells out the five languages; everyone else derives from `LANGUAGES`. (step 14's
    `LanguageCode` is a typing Literal, which cannot be derived: it is checked equal instead.)"""
    import typing

    from cells.step_02_profiles import LANGUAGES
    from cells.step_14_trainer import LanguageCode

    home = ROOT / "cells" / "step_02_profiles.py"
    spelled = [f"{p.relative_to(ROOT)}:{line}" for p in SOURCES if p != home
               for line in _language_lists(p, set(LANGUAGES))]
    assert spelled == [], f"derive these from step_02_profiles.LANGUAGES: {spelled}"
    assert typing.get_args(LanguageCode) == LANGUAGES


def test_the_language_list_check_catches_a_copy(tmp_path):
    copy = tmp_path / "copy.py"
    copy.write_text('A = ("hi", "ta", "kn", "en", "hinglish")\nW = {"hi": 1, "ta": 1, "kn": 1, "en": 1, "hinglish": 1}\n'
                    'T = {"hi": "x", "ta": "y", "kn": "z", "en": "w", "hinglish": "v"}\n', encoding="utf-8")
    assert _language_lists(copy, {"hi", "ta", "kn", "en", "hinglish"}) == [1, 2]
