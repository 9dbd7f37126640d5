"""`python -m cells`: every command's `--help` agrees with the README's command table and with itself, and the
figures the docs state about the reward are the ones the code declares.

- Every subcommand (and every bench) has a row in the README's command table, and every row names a command.
- Every `--flag` a README row shows exists in that command's own `--help`.
- Every `--flag` a command's one-line help names exists in that command's own `--help`.
- Every command's `--help` opens with a whole description: no sentence cut at a docstring's first line break.
- The `reward:formula` blocks in the docs are what `python -m cells judge --docs` writes, and no doc types a
  reward constant's value outside them.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from cells.__main__ import build_parser, main
from cells.bench import BENCHES

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def readme_commands() -> list[tuple[list[str], str]]:
    """`(command words, the row's command cell)` per command of the README's `python -m cells ...` table; a cell
    holding several commands (`bench env` / `bench policies`) gives one entry each."""
    text = README.read_text(encoding="utf-8")
    table = text.split("| `python -m cells ...` | what it does |", 1)[1].split("\n\n", 1)[0]
    out = []
    for line in table.splitlines()[2:]:
        cell = line.split(" | ", 1)[0].lstrip("| ")
        for code in re.findall(r"`([^`]+)`", cell):
            words = [w for w in code.split() if not w.startswith(("-", "[", "runs/", "|"))]
            out.append((words[:2] if words[0] == "bench" else words[:1], code))
    return out


def help_of(*command: str) -> str:
    """What `python -m cells COMMAND --help` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return out.getvalue()


def subcommands() -> dict[str, str]:
    """Every subcommand and its one-line help, as the parser declares them."""
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    return {choice.dest: choice.help for choice in action._choices_actions}


def test_every_command_has_a_row_and_every_row_a_command():
    rows = {" ".join(words) for words, _ in readme_commands()}
    expected = {name for name in subcommands() if name != "bench"} | {f"bench {what}" for what in BENCHES}
    assert rows == expected, f"README rows without a command: {rows - expected}; commands without a row: {expected - rows}"


@pytest.mark.parametrize(("words", "cell"), readme_commands(), ids=lambda x: x if isinstance(x, str) else None)
def test_every_flag_in_the_readme_exists_in_that_commands_help(words, cell):
    text = help_of(*words)
    missing = [flag for flag in FLAG.findall(cell) if flag not in text]
    assert not missing, f"README's `{cell}` shows {missing}, which `python -m cells {' '.join(words)} --help` lacks"


@pytest.mark.parametrize("name", sorted(subcommands()))
def test_the_one_line_help_names_only_flags_the_command_has(name):
    line = subcommands()[name]
    own = help_of(name, *(["env"] if name == "bench" else []))
    missing = [flag for flag in FLAG.findall(line) if flag not in own]
    assert not missing, f"`python -m cells --help` says {name} takes {missing}; its own --help does not"
    if name == "bench":
        assert all(what in line for what in BENCHES), f"bench's help lists {line!r}, not every one of {BENCHES}"


def description_of(help_text: str) -> str:
    """The description a `--help` prints: between the usage and the first argument section."""
    after_usage = help_text.split("\n\n", 1)[1] if "\n\n" in help_text else ""
    return re.split(r"\n(?:options|positional arguments):", "\n" + after_usage, maxsplit=1)[0].strip()


@pytest.mark.parametrize("words", sorted({tuple(w) for w, _ in readme_commands()}), ids=" ".join)
def test_every_help_opens_with_a_whole_description(words):
    description = description_of(help_of(*words))
    assert description, f"`python -m cells {' '.join(words)} --help` has no description"
    assert description[-1] in ".)`:", (
        f"`python -m cells {' '.join(words)} --help` stops mid-sentence: {description[-60:]!r}")


def test_the_curve_help_is_not_cut_mid_sentence():
    """The regression: `description=__doc__.splitlines()[0]` printed `...[--docs]`: the` and stopped."""
    assert "learning curve of a finished CPU run's GRPO" in help_of("curve")
    assert description_of("usage: x\n\n`python -m cells curve [--docs]`: the\n\noptions:\n  -h")[-1] not in ".)`:"


# ------------------------------------------------------------------------------------ the reward's figures in docs
def test_the_reward_formula_blocks_are_what_the_judge_command_writes():
    from cells.evaluation import docblocks, reward_docs

    expected = reward_docs.reward_formula_markdown().strip("\n")
    for doc, _ in reward_docs.REWARD_DOCS:
        written = docblocks.block_body((ROOT / doc).read_text(encoding="utf-8"), reward_docs.BLOCK)
        assert written is not None, f"{doc} lost its {reward_docs.BLOCK} markers"
        assert written.split("\n", 2)[2].strip("\n") == expected, (
            f"{doc}'s reward formula is stale: run `python -m cells judge --docs`")


def test_the_formula_block_follows_the_declarations(monkeypatch):
    """The block is rendered from the constants, so a changed constant changes the docs (and the test above)."""
    from cells import step_04_datatypes, step_08_rewards
    from cells.evaluation.reward_docs import reward_formula_markdown

    assert "∈ [−0.5, 1]" in reward_formula_markdown() and step_04_datatypes.MIN_REWARD == -0.5
    monkeypatch.setattr(step_04_datatypes, "MIN_REWARD", -0.7)
    monkeypatch.setattr(step_08_rewards, "HARM_COST", 0.6)
    text = reward_formula_markdown()
    assert "∈ [−0.7, 1]" in text and "− 0.6 · harmed" in text and "harm 0.6 more" in text


REWARD_CONSTANTS = ("MIN_REWARD", "FAILED_OFFENCE_WEIGHT", "HARM_COST")


def typed_reward_figures(text: str) -> list[str]:
    """Lines outside generated blocks that name a reward constant and a number: a figure typed by hand."""
    outside = re.sub(r"<!-- ([\w:.-]+):begin.*?<!-- \1:end -->", "", text, flags=re.DOTALL)
    return [line for line in outside.splitlines()
            if any(c in line for c in REWARD_CONSTANTS) and re.search(r"[-−]?\d+\.\d", line)]


def test_no_doc_types_a_reward_constants_value():
    docs = [README, *sorted((ROOT / "docs").glob("*.md"))]
    typed = {p.name: lines for p in docs if (lines := typed_reward_figures(p.read_text(encoding="utf-8")))}
    assert not typed, f"figures typed next to a reward constant (render them: python -m cells judge --docs): {typed}"


def test_the_typed_figure_check_catches_the_old_contradiction():
    old = "What a failed episode's offences cost is `MIN_REWARD` in `cells/step_04_datatypes.py` (-0.1: the lowest"
    assert typed_reward_figures(old) == [old]
    block = "<!-- reward:formula:begin x -->\nReward ∈ [−0.5, 1] (`MIN_REWARD`)\n<!-- reward:formula:end -->"
    assert typed_reward_figures(block) == []
