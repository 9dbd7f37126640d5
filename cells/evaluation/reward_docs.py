"""The reward's combination and its figures as markdown, rendered from their declarations: step 8's `WEIGHTS`,
`FAILED_OFFENCE_WEIGHT`, `HARM_COST` and `PENALTY_CAP`, and step 4's `MIN_REWARD`. `python -m cells judge --docs`
writes it as the block `reward:formula` into every doc that states the formula (`REWARD_DOCS`), so no doc types a
figure the code may change (tests/test_cli.py checks the blocks are current).
"""

from __future__ import annotations

BLOCK = "reward:formula"
# Where the block goes: (file, the commit named on the block's first line: "" for the README, which names none;
# None for the checkout's).
REWARD_DOCS: tuple[tuple[str, str | None], ...] = (
    ("README.md", ""),
    ("docs/design.md", None),
    ("docs/contributing.md", None),
)


def _figure(value: float) -> str:
    """0.45 -> `.45`, 0.4 -> `0.4`, -0.5 -> `−0.5`: how the formula writes its constants."""
    text = f"{abs(value):g}"
    return ("−" if value < 0 else "") + text


def reward_formula_markdown() -> str:
    """The formula as a code block, then the bounds it implies, each figure from its declaration."""
    from cells.step_04_datatypes import MIN_REWARD
    from cells.step_08_rewards import FAILED_OFFENCE_WEIGHT, HARM_COST, PENALTY_CAP, WEIGHTS

    weights = ", ".join(f"{name} {f'{w:.2f}'.lstrip('0')}" for name, w in WEIGHTS.items())
    offences = FAILED_OFFENCE_WEIGHT * PENALTY_CAP
    return "\n".join([
        "```",
        f"quality = Σ wᵢ·rᵢ / Σ wᵢ   over the available components ({weights})",
        f"reward  = clamp01(quality · (1 + r_penalty) · (1 − (c − r_task)²)) "
        f"+ {_figure(FAILED_OFFENCE_WEIGHT)} · r_penalty · (1 − r_task) − {_figure(HARM_COST)} · harmed",
        "```",
        "",
        f"Reward ∈ [{_figure(MIN_REWARD)}, 1] (`MIN_REWARD`): a failed episode's offences cost up to "
        f"{_figure(offences)} (`FAILED_OFFENCE_WEIGHT` at the penalty cap), harm {_figure(HARM_COST)} more "
        "(`HARM_COST`), and doing nothing earns 0.",
    ]) + "\n"
