"""Step 3 - data: load every fixture under `cells/data/`, check its shape, write a sha256 manifest.

Fixtures are YAML or JSON files. Each declares `version` and the top-level keys listed in
`FIXTURE_KEYS`; deep validation (drift patterns, templates) belongs to the step that owns the
data (steps 6 and 7), which call `load_fixture` here so every file is read one way.

Reads nothing; writes `<run_dir>/data_manifest.json` (`ctx.artifacts["data_manifest"]`).
Run alone: `python -m cells run --profile cpu-smoke --steps 3` (< 1 s).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cells.distributed import is_main_process
from cells.errors import DriftCallError

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context

DATA_DIR = Path(__file__).resolve().parent / "data"

# Required top-level keys per fixture; a fixture not listed here must still parse and carry `version`.
FIXTURE_KEYS: dict[str, tuple[str, ...]] = {
    "drifts.yaml": ("version", "patterns"),
    "drift_families.yaml": ("version", "families"),
    "templates.yaml": ("version", "templates"),
    "i18n.yaml": ("version", "cities", "phrases"),
}


class DataError(DriftCallError, ValueError):
    """A fixture is missing, unparsable or lacks required keys; the message names the file and key."""


@dataclass(frozen=True)
class DataBundle:
    """Every fixture, parsed, with its sha256."""

    fixtures: tuple[tuple[str, Any], ...]
    manifest: tuple[tuple[str, str], ...]  # (relative path, sha256)

    def get(self, name: str) -> Any:
        for fname, payload in self.fixtures:
            if fname == name:
                return payload
        raise DataError(f"no fixture {name!r}; have {[f for f, _ in self.fixtures]}")


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _parse(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            return yaml.safe_load(text)
        return json.loads(text)
    except Exception as exc:  # yaml/json raise several types; all mean the same to the user
        raise DataError(f"{path.name}: cannot parse ({exc})") from exc


@cache
def load_fixture(name: str, data_dir: Path = DATA_DIR) -> Any:
    """Parse `cells/data/<name>` and check its required top-level keys (cached; treat as read-only)."""
    path = data_dir / name
    if not path.is_file():
        raise DataError(f"fixture {name!r} not found in {data_dir}")
    payload = _parse(path)
    if not isinstance(payload, dict):
        raise DataError(f"{name}: top level must be a mapping, got {type(payload).__name__}")
    required = FIXTURE_KEYS.get(name, ("version",))
    missing = [k for k in required if k not in payload]
    if missing:
        raise DataError(f"{name}: missing top-level key(s) {missing}; required: {list(required)}")
    return payload


def fixture_names(data_dir: Path = DATA_DIR) -> tuple[str, ...]:
    return tuple(sorted(p.name for p in data_dir.iterdir() if p.suffix in (".yaml", ".yml", ".json")))


def load_all(data_dir: Path = DATA_DIR) -> DataBundle:
    """Load every fixture and build the manifest; raises if an expected fixture is absent."""
    names = fixture_names(data_dir)
    absent = sorted(set(FIXTURE_KEYS) - set(names))
    if absent:
        raise DataError(f"expected fixture(s) {absent} in {data_dir}")
    fixtures = tuple((n, load_fixture(n, data_dir)) for n in names)
    manifest = tuple((n, sha256_file(data_dir / n)) for n in names)
    return DataBundle(fixtures=fixtures, manifest=manifest)


def run(ctx: Context) -> Context:
    """Load and validate every fixture and write `data_manifest.json` (the steps that use a fixture load it
    themselves, cached, so a step run alone needs no Context slot for it)."""
    bundle = load_all()
    path = ctx.run_dir / "data_manifest.json"
    if is_main_process():  # several processes: one writer (cells.distributed)
        path.write_text(json.dumps(dict(bundle.manifest), indent=2), encoding="utf-8")
    ctx.artifacts["data_manifest"] = path
    print(f"[data] {len(bundle.fixtures)} fixtures: {', '.join(n for n, _ in bundle.manifest)}")
    return ctx
