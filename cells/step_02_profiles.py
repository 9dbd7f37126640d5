"""Step 2 - profiles: resolve the preset every later step reads, and document every knob.

A `Profile` holds every knob, each declared once with its help, scope and allowed values
(`cells/profiles/profile.py`); the presets override only what differs, each override with a one-line reason
(`cells/profiles/presets.py`). This step is their face: `get_profile`, `with_knobs` (`--set KNOB=VALUE`),
`load_run_profile` (a finished run's profile) and the generated tables (`python -m cells profiles [--docs]`).

Reads `ctx.profile`; writes `<run_dir>/profile.json`.
Run alone: `python -m cells run --profile cpu-smoke --steps 2` (instant).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cells.distributed import is_main_process
from cells.profiles.presets import PRESET_NOTES, PROFILES
from cells.profiles.profile import (
    DRIFT_SOURCES,
    KNOB_SCOPES,
    LANGUAGES,
    MIN_TURN_BUDGET,
    TURN_BUDGETS,
    Profile,
    ProfileError,
    TinyModelRecipe,
    knob,
    knob_cap,
    knob_choices,
    knobs_in_scope,
)
from cells.seeding import (  # re-exported: where they were declared before
    EVAL_SEEDS,
    PROBE_SEEDS,
    SEED_RANGES,
    TRAIN_SEEDS,
    SeedRange,
)

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context


def _as_tuples(value: Any) -> Any:
    """JSON lists as the tuples a frozen profile holds, at every depth (e.g. `language_weights`)."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list) else value


def with_knobs(profile: Profile, settings: Sequence[str]) -> Profile:
    """`profile` with each `KNOB=VALUE` of `settings` applied (`python -m cells run --set`): the value is read as
    JSON (numbers, true/false, lists), else as a plain string; the profile's own checks then run on the result."""
    fields = {f.name for f in dataclasses.fields(Profile)}
    changes: dict[str, Any] = {}
    for item in settings:
        name, sep, raw = item.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ProfileError(f"--set wants KNOB=VALUE, got {item!r}")
        if name not in fields or name in ("name", "knobs_set"):
            raise ProfileError(f"--set {name}: no such knob; `python -m cells profiles` lists them")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        default = getattr(profile, name)
        if name == "tiny" and isinstance(value, dict):
            value = _reshaped_tiny(profile, value, raw)
        if isinstance(default, tuple) and isinstance(value, list):
            value = _as_tuples(value)
        if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if default is not None and type(value) is not type(default):
            raise ProfileError(f"--set {name}={raw}: expected a {type(default).__name__} like {default!r}")
        changes[name] = value
    if not changes:
        return profile
    return dataclasses.replace(profile, **changes, knobs_set=(*profile.knobs_set, *settings))


def _reshaped_tiny(profile: Profile, fields: dict[str, Any], raw: str) -> TinyModelRecipe:
    """The profile's tiny-model recipe with `fields` changed (`--set 'tiny={"hidden_size": 128}'`): the model's
    shape is a lever (a larger model may generalise better) without writing a preset."""
    if profile.tiny is None:
        raise ProfileError(f"--set tiny={raw}: profile {profile.name!r} boots a Hub model, not the tiny local one")
    known = {f.name for f in dataclasses.fields(TinyModelRecipe)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ProfileError(f"--set tiny={raw}: {unknown} are not fields of TinyModelRecipe ({sorted(known)})")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in fields.values()):
        raise ProfileError(f"--set tiny={raw}: every field of the model's shape is a positive integer")
    return dataclasses.replace(profile.tiny, **fields)


def get_profile(name: str) -> Profile:
    """Return the preset called `name`; unknown names list the valid ones."""
    try:
        return PROFILES[name]
    except KeyError:
        valid = ", ".join(sorted(PROFILES))
        raise ProfileError(f"unknown profile {name!r}; valid profiles: {valid}") from None


# Where `python -m cells profiles --docs` writes: (file, block name, the commit named on the block's first line:
# "" for the README, which names none; None for the checkout's) and what goes there.
PROFILE_DOCS: tuple[tuple[str, str, str | None], ...] = (
    ("README.md", "profiles:presets", ""),
    ("docs/profiles.md", "profiles:knobs", None),
)


def _markdown_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = [header, tuple("---" for _ in header), *rows]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines) + "\n"


def presets_markdown() -> str:
    """The presets: what each runs and what it is for (`PRESET_NOTES`)."""
    return _markdown_table(("profile", "model", "what it is for"),
                           [(f"`{name}`", *notes) for name, notes in PRESET_NOTES.items()])


def _allowed(f: dataclasses.Field[Any]) -> str:
    """What a knob's declaration allows beyond its type, as a sentence for the table ("" if nothing)."""
    if f.metadata["choices"]:
        return "; one of " + ", ".join(f"`{c}`" for c in f.metadata["choices"])
    if f.metadata["at_most"] is not None:
        return f"; at most {f.metadata['at_most']}"
    return ""


def knobs_markdown() -> str:
    """Every knob: its default, its scope and what it sets, as declared on `Profile`; then the scopes."""
    rows: list[tuple[str, ...]] = []
    for f in dataclasses.fields(Profile):
        default = f.metadata["shown"] or f"`{f.default!r}`"
        rows.append((f"`{f.name}`", str(default), str(f.metadata["scope"]), str(f.metadata["help"]) + _allowed(f)))
    scopes = "".join(f"- `{name}`: {what}\n" for name, what in KNOB_SCOPES.items())
    return _markdown_table(("knob", "default", "scope", "what it sets"), rows) + "\nScopes:\n\n" + scopes


def load_run_profile(run_dir: str | Path) -> Profile:
    """The profile a finished run used: the preset named in `<run_dir>/profile.json` with every knob that shaped
    its models (`trained_knobs`: its `--model`, `--seed` and recipe included) as the file records it, then its
    `--set` changes (`knobs_set`, reapplied, which also restores the evaluation knobs it set). Why not the preset
    alone: a `--seed 2` run reloaded as its preset would rebuild the tiny model's cache under seed 1234's key and
    draw its RNGs from the wrong seed; a `--set` run's controls would match another recipe; and presets change (a
    recipe chosen later), while a run's models keep the knobs they were trained with. A knob the file lacks (added
    since) is at its declared default: what the code did before the knob existed. Evaluation and bookkeeping
    knobs not `--set` follow the preset."""
    path = Path(run_dir) / "profile.json"
    if not path.is_file():
        raise ProfileError(f"{path} is missing: run the pipeline (step 2 writes it) for {run_dir} first")
    saved = json.loads(path.read_text(encoding="utf-8"))
    trained = {f.name: _recorded(f, saved) for f in trained_knobs()}
    return with_knobs(dataclasses.replace(get_profile(saved["name"]), **trained), saved.get("knobs_set", []))


def trained_knobs() -> tuple[dataclasses.Field[Any], ...]:
    """The `Profile` fields whose value shapes a run's trained models (scopes other than evaluation and run)."""
    return tuple(f for f in dataclasses.fields(Profile) if f.metadata["scope"] not in ("evaluation", "run"))


def _recorded(f: dataclasses.Field[Any], saved: dict[str, Any]) -> Any:
    """Field `f`'s value as `profile.json` holds it (tuples and nested recipes restored), else its default."""
    if f.name not in saved:
        if f.default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            return f.default_factory()
        return f.default
    value = saved[f.name]
    if f.name == "tiny" and isinstance(value, dict):
        return TinyModelRecipe(**{k: _as_tuples(v) for k, v in value.items()})
    return _as_tuples(value)


def run(ctx: Context) -> Context:
    """Write the resolved profile to the run directory."""
    path = ctx.run_dir / "profile.json"
    if is_main_process():  # several processes: one writer (cells.distributed)
        path.write_text(json.dumps(ctx.profile.to_dict(), indent=2), encoding="utf-8")
    ctx.artifacts["profile"] = path
    print(f"[profiles] {ctx.profile.name}: G={ctx.profile.num_generations} steps/stage={ctx.profile.steps_per_stage}")
    return ctx


__all__ = [
    "DRIFT_SOURCES", "EVAL_SEEDS", "KNOB_SCOPES", "LANGUAGES", "MIN_TURN_BUDGET", "PRESET_NOTES", "PROBE_SEEDS", "PROFILES",
    "PROFILE_DOCS", "SEED_RANGES", "TRAIN_SEEDS", "TURN_BUDGETS", "Profile", "ProfileError", "SeedRange",
    "TinyModelRecipe", "get_profile", "knob", "knob_cap", "knob_choices", "knobs_in_scope", "knobs_markdown",
    "load_run_profile", "presets_markdown", "run", "with_knobs",
]
