"""Edit a step module, re-run its notebook cell: the edit takes effect without restarting the kernel.

Python caches imported modules, so re-running a cell after editing `cells/step_NN_*.py` would run
the old code. `pipeline.run_step` calls `reload_edited_modules()` before each step: every loaded
`cells.*` module whose source changed since it was loaded is re-imported, and so is every loaded
module that imports from it at its top level (a `from cells.x import f` binding would otherwise
keep the old `f`; read from the source with `ast`), dependencies first. `remember_loaded_modules()` (after each step) records the source
digest of modules seen for the first time.

Limits, stated rather than hidden: objects created before a reload keep their old classes (a
`Profile` or `Episode` already in `ctx` is not rebuilt), so after editing a data-model module
(step 4) re-run the cells from that step on. `cells.pipeline` itself is never reloaded (it is
running the reload), nor is this module, nor `cells.context` (the notebook's `ctx` is an instance of its class).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import sys
from pathlib import Path
from types import ModuleType

PACKAGE = "cells"
_NEVER = frozenset({"cells.pipeline", "cells.context", "cells.reloading", "cells.__main__"})
_seen: dict[str, tuple[float, str]] = {}  # module name -> (mtime, sha256 of the source when loaded)


def _source(module: ModuleType) -> Path | None:
    path = getattr(module, "__file__", None)
    return Path(path) if path and path.endswith(".py") else None


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def project_modules() -> dict[str, ModuleType]:
    """Loaded `cells.*` modules backed by a .py file, except the ones that must not reload."""
    return {name: m for name, m in list(sys.modules.items())
            if (name == PACKAGE or name.startswith(PACKAGE + ".")) and name not in _NEVER
            and m is not None and _source(m) is not None}


def remember_loaded_modules() -> None:
    """Record the source digest of every project module not seen before."""
    for name, module in project_modules().items():
        path = _source(module)
        if name not in _seen and path is not None and path.exists():
            _seen[name] = (path.stat().st_mtime, _digest(path))


def edited_modules() -> set[str]:
    """Names of loaded project modules whose source differs from what was loaded."""
    out = set()
    for name, module in project_modules().items():
        path, known = _source(module), _seen.get(name)
        if known is None or path is None or not path.exists():
            continue
        if path.stat().st_mtime != known[0] and _digest(path) != known[1]:
            out.add(name)
    return out


def imported_modules(module: ModuleType) -> set[str]:
    """Project modules `module` imports at its top level (`import x`, `from x import y`, relative too),
    read from its source: a `from cells.x import CONSTANT` binding leaves no trace at run time."""
    path = _source(module)
    if path is None or not path.exists():
        return set()
    package = module.__name__ if path.name == "__init__.py" else module.__name__.rpartition(".")[0]
    found = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from pkg import submodule`
    return {name for name in found if name == PACKAGE or name.startswith(PACKAGE + ".")}


def _uses(module: ModuleType, names: set[str]) -> set[str]:
    """Which of `names` this module imports from at its top level."""
    return imported_modules(module) & names


def reload_edited_modules() -> list[str]:
    """Re-import edited project modules and the loaded modules that depend on them; returns the
    names reloaded, in order (dependencies before their dependents)."""
    changed = edited_modules()
    if not changed:
        return []
    modules = project_modules()
    stale = set(changed)
    grew = True
    while grew:  # everything that (transitively) holds a reference into a stale module is stale too
        grew = False
        for name, module in modules.items():
            if name not in stale and _uses(module, stale):
                stale.add(name)
                grew = True
    order: list[str] = []
    pending = set(stale)
    while pending:
        ready = sorted(n for n in pending if not (_uses(modules[n], pending) - {n})) or sorted(pending)[:1]
        for name in ready:
            importlib.reload(modules[name])
            path = _source(modules[name])
            if path is not None:
                _seen[name] = (path.stat().st_mtime, _digest(path))
            order.append(name)
            pending.discard(name)
    print(f"[reload] re-imported {len(order)} edited module(s) and their dependents: {', '.join(order)}")
    return order
