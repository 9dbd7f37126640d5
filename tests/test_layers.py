"""Layers point one way, and no module imports itself back.

    data model (with the `Context` the steps hand on, and the profile) < world (vendors, drift and its families,
    tasks) < rewards < env (with its action grammar) < agent (policies, prompt, rollout) < modeling
    < modeling steps (12-14) < evaluation < training < training steps (15-17) < evaluation steps (18-25) and the
    run readers (`cells/commands/`) < tools (benches, experiments, the runner, the CLI)

A package sits below the step modules that face it: `cells/modeling/`, `cells/evaluation/` and `cells/training/`
are the engines the steps coordinate, so a helper there never reaches back up into a step. The evaluation
engine (held-out plans, the runner, records, reports, statistics) sits below training because step 15 checks
its warm start on held-out seeds with it; the evaluation steps sit above training, with the run readers
(`cells/commands/`: `results.py`, `diagnose.py`), which read what every step wrote. The runner
(`cells.pipeline`: the step registry and `run`) is a tool: it imports every step, and no step imports it; the
`Context` every step takes lives at the bottom (`cells.context`). The rules, every import under cells/ (lazy ones
inside functions, relative ones, and type-only ones under `if TYPE_CHECKING:`) included:

1. an import goes to the same layer or a lower one;
2. a step imports no later step (the notebook's reading order);
3. no import cycle between modules at run time (imports under `if TYPE_CHECKING:` never run);
4. no cycle at all, type-only imports included, through the runner or the `Context`'s module.

A type-only import depends on the definition it names, so it counts where that name is defined: a name a module
merely re-exports (`from cells.pipeline import Context`) resolves to its home (`cells.context`).
A new module must be placed in a layer here.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAYERS: tuple[tuple[str, str], ...] = (
    ("model", r"cells\.(step_0[1-4]_\w+|progress|errors|distributed|codec|seeding|formats|context|profiles)(\..+)?"),
    ("world", r"cells\.(step_0[5-7]_\w+|vendors|tasks|drift)(\..+)?"),
    ("rewards", r"cells\.(step_08_\w+|rewards)(\..+)?"),
    ("env", r"cells\.(step_09_\w+|step_10_\w+|actions|openenv_env|server)(\..+)?"),
    ("agent", r"cells\.(step_11_\w+|agent)(\..+)?"),
    ("modeling", r"cells\.(modeling|trl_env)(\..+)?"),
    ("modeling steps", r"cells\.step_1[2-4]_\w+(\..+)?"),
    ("evaluation", r"cells\.evaluation(\..+)?"),
    ("training", r"cells\.training(\..+)?"),
    ("training steps", r"cells\.step_1[5-7]_\w+(\..+)?"),
    ("evaluation steps", r"cells\.(step_(1[89]|2\d)_\w+|commands)(\..+)?"),
    ("tools", r"cells(\.(pipeline|__main__|reloading|bench|experiments)(\..+)?)?"),
)
RUNNER, CONTEXT = "cells.pipeline", "cells.context"
STEP = re.compile(r"cells\.step_(\d\d)_\w+")


def layer_of(module: str) -> int | None:
    for index, (_, pattern) in enumerate(LAYERS):
        if re.fullmatch(pattern, module):
            return index
    return None


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only_lines(tree: ast.AST) -> set[int]:
    """Lines of the imports under `if TYPE_CHECKING:` (they never run)."""
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            lines |= {n.lineno for stmt in node.body for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return lines


def _from_base(node: ast.ImportFrom, package: str) -> str:
    """The module a `from ... import` reads, relative imports resolved against `package`."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    return ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))


def imports_in(source: str, module: str, is_package: bool = False) -> list[tuple[str, int, bool]]:
    """(imported module or module.name, line, type-only) for every import in `source`, however deeply nested."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    type_only = _type_only_lines(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_base(node, package)
            # a type-only `from m import name` depends on `name`'s definition, not on running `m`
            out += [] if node.lineno in type_only else [(base, node.lineno)]
            out += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return [(name, line, line in type_only) for name, line in out if name.startswith("cells.")]


@functools.cache
def _reexports(module: str) -> dict[str, str]:
    """Names `module` binds at its top level by a `from cells.x import name` -> `cells.x.name`."""
    path = MODULES.get(module)
    if path is None:
        return {}
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and (base := _from_base(node, package)).startswith("cells."):
            out.update({alias.asname or alias.name: f"{base}.{alias.name}" for alias in node.names})
    return out


def definition_of(name: str) -> str:
    """Where an imported `cells.` name is defined, following the re-exports of the modules it passes through
    (`cells.pipeline.Context` -> `cells.context.Context`); a module, or a name its module defines, is itself."""
    seen = set()
    while name not in seen:
        seen.add(name)
        home = _home(name, set(MODULES))
        target = _reexports(home).get(name[len(home) + 1:].split(".")[0]) if home and home != name else None
        if target is None:
            return name
        name = target
    return name


def imports_resolved(source: str, module: str, is_package: bool = False) -> list[tuple[str, int, bool]]:
    """`imports_in`, each type-only import counted where its name is defined (`definition_of`): it never runs, so
    it depends on the definition, not on the module that re-exports it."""
    return [(definition_of(name) if type_only else name, line, type_only)
            for name, line, type_only in imports_in(source, module, is_package)]


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    """Rules 1-2 of the module docstring, as one line per offending import."""
    mine = layer_of(module)
    step = STEP.fullmatch(module)
    found = []
    for name, line, _ in imports_resolved(source, module, is_package):
        theirs = layer_of(name)
        if mine is not None and theirs is not None and theirs > mine:
            found.append(f"line {line}: {name} ({LAYERS[theirs][0]}) from {LAYERS[mine][0]}")
        if step and (later := STEP.match(name)) and int(later.group(1)) > int(step.group(1)):
            found.append(f"line {line}: {name}: a later step than {module}")
    return found


def imports_of(path: Path) -> list[tuple[str, int, bool]]:
    return imports_resolved(path.read_text(encoding="utf-8"), module_name(path), path.name == "__init__.py")


SOURCES = sorted((ROOT / "cells").rglob("*.py"))
MODULES = {module_name(p): p for p in SOURCES}


def test_every_module_has_a_layer():
    unplaced = [module_name(p) for p in SOURCES if layer_of(module_name(p)) is None]
    assert unplaced == [], f"place these modules in a layer in tests/test_layers.py: {unplaced}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: module_name(p))
def test_imports_never_point_up(path: Path):
    found = violations(module_name(path), path.read_text(encoding="utf-8"), path.name == "__init__.py")
    assert found == [], f"{module_name(path)} ({LAYERS[layer_of(module_name(path)) or 0][0]}) imports upward: {found}"


def _home(name: str, modules: set[str]) -> str | None:
    """The module an imported name lives in (`cells.a.b.f` -> `cells.a.b`)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                cycles.append(sorted([v, *component]))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def import_graph(type_only: bool = False) -> dict[str, set[str]]:
    """module -> the modules it imports at run time (lazy ones too), and with `type_only` also those it imports
    under `if TYPE_CHECKING:`; a package's own `__init__` left out."""
    names = set(MODULES)
    graph = {}
    for module, path in MODULES.items():
        homes = {_home(name, names) for name, _, only_typing in imports_of(path) if type_only or not only_typing}
        graph[module] = {h for h in homes if h and h != module and not module.startswith(h + ".")}
    return graph


def test_no_import_cycles():
    """A cycle hidden behind a lazy import still ties the modules together: each must be importable, testable and
    understandable without the other. Open one by moving what both need into a module below them."""
    assert import_cycles(import_graph()) == []


def test_no_cycle_runs_through_the_runner_or_the_context():
    """Type-only imports included: the runner imports every step (by name) and its lazy helpers, each step takes the
    `Context` from below them all, and the `Context`'s module names nothing that takes it back."""
    cycles = import_cycles(import_graph(type_only=True))
    assert [c for c in cycles if RUNNER in c or CONTEXT in c] == []
    assert all(layer_of(m) == 0 for m in import_graph(type_only=True)[CONTEXT]), "the Context's module points up"


def test_the_checker_sees_lazy_and_relative_upward_imports():
    """An import hidden inside a function, or written relative, is found all the same."""
    lazy = imports_in("def f():\n    from cells.step_11_agent import ExpertPolicy\n", "cells.vendors.x")
    relative = imports_in("from ..agent.policies import base\n", "cells.rewards.x")
    assert ("cells.step_11_agent", 2, False) in lazy and ("cells.agent.policies", 1, False) in relative
    assert violations("cells.vendors.x", "def f():\n    from cells.step_11_agent import ExpertPolicy\n")
    assert violations("cells.rewards.x", "from ..agent.policies import base\n")


@pytest.mark.parametrize(("module", "source"), [
    ("cells.step_12_model", "def f():\n    from cells.step_14_trainer import render_initial_prompt\n"),  # later step
    ("cells.modeling.sources", "def f():\n    from cells.training.warm_start import render_segments\n"),  # training
    ("cells.modeling.x", "def f():\n    from cells.step_13_grpo_config import reward_components\n"),  # helper -> step
    ("cells.training.x", "def f():\n    from cells.pipeline import make_context\n"),  # the runner, at run time
    ("cells.training.control", "def f():\n    from cells.step_15_train_stage1 import sft_plan_item\n"),  # helper -> step
    ("cells.evaluation.runner", "def f():\n    from cells.training.metrics import read_metrics_csv\n"),  # engine -> training
])
def test_the_finer_layers_catch_what_the_coarse_one_missed(module, source):
    """The upward imports the one-layer 'steps 12-25 + modeling + training + evaluation' check let through."""
    assert violations(module, source) != []


def test_a_type_only_import_counts_where_its_name_is_defined():
    """The runner re-exports `Context` from its home at the bottom, so annotating with it through the runner is
    fine; any name the runner itself defines is the tools layer, type-only or not."""
    assert definition_of("cells.pipeline.Context") == "cells.context.Context"
    assert definition_of("cells.pipeline.make_context") == "cells.pipeline.make_context"
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cells.pipeline import Context\n"
    assert violations("cells.step_04_datatypes", source) == []
    assert violations("cells.step_04_datatypes", source.replace("Context", "make_context")) != []
    assert violations("cells.step_04_datatypes", source.replace("pipeline import Context", "step_10_env import X"))


def test_the_cycle_check_catches_a_lazy_cycle():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


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
    """Only the profile spells out the five languages; everyone else derives from `LANGUAGES`. (step 14's
    `LanguageCode` is a typing Literal, which cannot be derived: it is checked equal instead.)"""
    import typing

    from cells.profiles.profile import LANGUAGES
    from cells.step_14_trainer import LanguageCode

    home = ROOT / "cells" / "profiles" / "profile.py"
    spelled = [f"{p.relative_to(ROOT)}:{line}" for p in SOURCES if p != home
               for line in _language_lists(p, set(LANGUAGES))]
    assert spelled == [], f"derive these from cells.profiles.profile.LANGUAGES: {spelled}"
    assert typing.get_args(LanguageCode) == LANGUAGES


def test_the_language_list_check_catches_a_copy(tmp_path):
    copy = tmp_path / "copy.py"
    copy.write_text('A = ("hi", "ta", "kn", "en", "hinglish")\nW = {"hi": 1, "ta": 1, "kn": 1, "en": 1, "hinglish": 1}\n'
                    'T = {"hi": "x", "ta": "y", "kn": "z", "en": "w", "hinglish": "v"}\n', encoding="utf-8")
    assert _language_lists(copy, {"hi", "ta", "kn", "en", "hinglish"}) == [1, 2]


def test_no_two_modules_or_packages_share_a_name():
    """A name says what a module holds, once: two files or packages under cells/ with the same name (`report.py`
    in two packages, `progress.py` beside `training/progress.py`) make a reader guess which one an import means."""
    seen: dict[str, list[str]] = {}
    for path in sorted((ROOT / "cells").rglob("*")):
        if "__pycache__" in path.parts:
            continue
        if path.is_dir() and (path / "__init__.py").exists():
            seen.setdefault(path.name, []).append(f"{path.relative_to(ROOT)}/")
        elif path.suffix == ".py" and path.stem not in ("__init__", "__main__"):
            seen.setdefault(path.stem, []).append(str(path.relative_to(ROOT)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}
