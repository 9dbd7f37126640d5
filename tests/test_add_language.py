"""docs/contributing.md "How to add a language", followed: in a temporary copy of the repository, every file its
numbered steps name gains a sixth language (`mr`, its tables a copy of Hindi's), and the world's tests run there.

The edit is mechanical, so it only does what the doc says: a tuple or `Literal` holding exactly the languages gains
the code, and every table keyed by every language (a dict in Python, a mapping in YAML) gains an entry under it.
A file the steps leave out keeps five entries, and the copy's loaders or tests fail naming it.
"""

from __future__ import annotations

import ast
import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cells.profiles.profile import LANGUAGES

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "contributing.md"
NEW, LIKE = "mr", "hi"  # the new code, and the language whose tables it copies (same script)
WORLD_TESTS = ("tests/test_step_05_vendors.py", "tests/test_step_06_drift.py", "tests/test_step_07_tasks.py",
               "tests/test_layers.py::test_the_language_list_is_declared_once")


def documented_files() -> list[str]:
    """The files the guide's numbered steps name, in order."""
    text = GUIDE.read_text(encoding="utf-8").split("## How to add a language", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^\d+\. (.+?)(?=^\d+\. |^\S|\Z)", text, flags=re.MULTILINE | re.DOTALL)
    return list(dict.fromkeys(f for step in steps for f in re.findall(r"`((?:cells|tests)/[\w/]+\.(?:py|yaml))`", step)))


def _is_language_list(node: ast.AST) -> bool:
    if not isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return False
    codes = [e.value for e in node.elts if isinstance(e, ast.Constant)]
    return len(codes) == len(node.elts) and set(codes) == set(LANGUAGES)


def add_language_to_python(source: str) -> str:
    """`source` with `NEW` appended to every literal list of the languages (a `Literal[...]` included) and an entry
    `NEW: <LIKE's value>` after `LIKE`'s in every dict keyed by every language."""
    lines = source.encode("utf-8").splitlines(keepends=True)
    inserts: list[tuple[int, int, str]] = []  # (line index, byte column, text)
    for node in ast.walk(ast.parse(source)):
        if _is_language_list(node):
            last = node.elts[-1]
            inserts.append((last.end_lineno - 1, last.end_col_offset, f', "{NEW}"'))
        elif isinstance(node, ast.Dict):
            keys = {k.value: v for k, v in zip(node.keys, node.values, strict=True) if isinstance(k, ast.Constant)}
            if set(LANGUAGES) <= set(keys):
                value = keys[LIKE]
                inserts.append((value.end_lineno - 1, value.end_col_offset,
                                f', "{NEW}": {ast.get_source_segment(source, value)}'))
    for line, col, text in sorted(inserts, reverse=True):
        lines[line] = lines[line][:col] + text.encode("utf-8") + lines[line][col:]
    return b"".join(lines).decode("utf-8")


def add_language_to_yaml(data: object) -> object:
    """`data` with an entry `NEW` (a copy of `LIKE`'s) in every mapping keyed by every language."""
    if isinstance(data, dict):
        out = {k: add_language_to_yaml(v) for k, v in data.items()}
        if set(LANGUAGES) <= set(out):
            out[NEW] = copy.deepcopy(out[LIKE])
        return out
    if isinstance(data, list):
        return [add_language_to_yaml(v) for v in data]
    return data


def follow_the_guide(root: Path, files: list[str]) -> None:
    for rel in files:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".yaml":
            new = yaml.safe_dump(add_language_to_yaml(yaml.safe_load(text)), allow_unicode=True, sort_keys=False)
        else:
            new = add_language_to_python(text)
        assert new != text, f"step naming {rel} changed nothing there: is the language still keyed in that file?"
        path.write_text(new, encoding="utf-8")


def test_the_guide_names_the_files_every_language_table_lives_in():
    files = documented_files()
    assert files[:2] == ["cells/profiles/profile.py", "cells/modeling/episode_dataset.py"]
    assert {"cells/tasks/i18n.py", "cells/data/i18n.yaml", "cells/data/templates.yaml",
            "cells/step_09_audio.py"} <= set(files)


def test_the_mechanical_edit_adds_the_code_and_nothing_else():
    source = ('from typing import Literal\nL = Literal["hi", "ta", "kn", "en", "hinglish"]\n'
              'N = {"hi": "नाम", "ta": "பெயர்", "kn": "ಹೆಸರು", "en": "name", "hinglish": "naam"}\nX = {"hi": 1}\n')
    edited = add_language_to_python(source)
    assert 'Literal["hi", "ta", "kn", "en", "hinglish", "mr"]' in edited and '"hi": "नाम", "mr": "नाम"' in edited
    assert 'X = {"hi": 1}' in edited
    assert add_language_to_yaml({"a": dict.fromkeys(LANGUAGES, "v"), "b": {"hi": 1}}) == {
        "a": {**dict.fromkeys(LANGUAGES, "v"), "mr": "v"}, "b": {"hi": 1}}


@pytest.mark.slow
def test_a_sixth_language_added_as_the_guide_says_passes_the_worlds_tests(tmp_path):
    root = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("cells", "tests"):
        shutil.copytree(ROOT / name, root / name, ignore=ignore)
    shutil.copy2(ROOT / "pyproject.toml", root / "pyproject.toml")
    follow_the_guide(root, documented_files())
    check = ("from cells.profiles.profile import LANGUAGES; from cells.step_07_tasks import generate; "
             "g = generate(seed=5, stage=2, language_weights={'mr': 1.0}); "
             "assert LANGUAGES[-1] == 'mr' and g.language == 'mr', g; print(g.seed_utterance)")
    env = {**os.environ, "PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1"}
    played = subprocess.run([sys.executable, "-c", check], cwd=root, env=env, capture_output=True, text=True,
                            timeout=120, check=False)
    assert played.returncode == 0, played.stderr[-3000:]
    assert re.search(r"[\u0900-\u097F]", played.stdout), played.stdout  # Devanagari, as Hindi's tables
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *WORLD_TESTS],
                           cwd=root, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
