"""Step 14 - trainer: the episode dataset, the multi-turn GRPO trainer, and adaptive KL.

- `DriftCallGRPOTrainer(trl.GRPOTrainer)` (`cells/modeling/grpo_trainer.py`, imported only when training starts:
  it imports trl and torch). Its `_generate_and_score_completions` plays G multi-turn episodes per distinct prompt
  through `rollout_group_fn` (`cells/agent/groups.py` over `cells/agent/rollout.py`), scores them with
  `reward_fn_driftcall` (step 13) and returns exactly what TRL's `_compute_loss` reads: `prompt_ids`/`prompt_mask`
  (left-padded), `completion_ids`/`completion_mask` (right-padded; the completion is the whole episode after the
  turn-0 prompt), `tool_mask` (1 = model token, 0 = env/template token; TRL multiplies it into the loss mask),
  group-relative `advantages`, `num_items_in_batch`, and `old_per_token_logps` / `ref_per_token_logps` exactly when
  TRL would compute them. Loss, KL, clipping and the optimiser step are TRL's own; `_compute_loss` and
  `_get_per_token_logps_and_entropies` only make TRL's log-prob pass project the model's own tokens through the LM
  head (`cells/modeling/model_token_logps.py`: the same log-probs where the loss reads them).
  Dynamic sampling (`resample_rounds=N`): a group whose G rewards are all equal carries no gradient, so it is
  replaced by a fresh dataset record and played again, up to N times per step; `groups/zero_std_first_frac`
  (first draw), `groups/zero_std_frac` (what the loss saw) and, with `group_labels`, both per label are logged.
  `resample_on="success"` also replaces a group whose episodes all succeed or all fail (its gradient comes from
  partial credit and penalties only); `groups/success_uniform_first_frac` / `_frac` are logged either way.
  `success_advantage=λ` adds λ to each successful episode's advantage after scaling (a RAFT-like pull towards the
  policy's own successes inside the same loss; 0 = off). `advantage_on="success"` computes the advantages from
  task success (0/1) instead of the shaped reward, as Reinforce-Rej and DAPO do with a correctness reward.
- `EpisodeDatasetAdapter` (`cells/modeling/episode_dataset.py`): record `i` = curriculum step `i`, a pure function
  of `i`; TRL is handed a dataset of step indices and the trainer materialises the records.
- `AdaptiveKLCallback` (`cells/modeling/adaptive_kl.py`): `beta *= exp(clamp(kp * (kl - target) / target, +-50))`,
  clamped to `[beta_min, beta_max]`, on each log that carries `kl`.

This module is the trainer's light face: the seed API (`make_driftcall_grpo_trainer_cls`,
`driftcall_grpo_trainer_methods`, the dataset adapter, the callback) without importing trl. The GRPO stages
(steps 15-17) build the trainer in `cells/training/grpo_stage.py`. Reads only the profile's adaptive-KL settings
from the Context; `run(ctx)` prints the API summary with them.
Run alone: `python -m cells run --profile cpu-smoke --steps 14` (instant).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from cells.agent.chat import render_initial_prompt  # re-exported: step 14's API
from cells.agent.prompt import PINNED_SYSTEM_PROMPT  # seed API re-export
from cells.modeling.adaptive_kl import (
    BETA_KL,
    DEFAULT_BETA_MAX,
    DEFAULT_BETA_MIN,
    DEFAULT_KP,
    AdaptiveKLCallback,
)
from cells.modeling.episode_dataset import (
    AdapterRecord,
    EnvFactory,
    EpisodeDatasetAdapter,
    EpisodeSampler,
    LanguageCode,
    RolloutGroupFn,
    TrainerSetupError,
)

if TYPE_CHECKING:  # pragma: no cover
    from cells.context import Context


def make_driftcall_grpo_trainer_cls(base_cls: type[Any] | None = None) -> type[Any]:
    """`DriftCallGRPOTrainer`, the `trl.GRPOTrainer` subclass (`cells/modeling/grpo_trainer.py`; imported here, so
    calling this imports trl). `base_cls`, a `GRPOTrainer` subclass of your own, puts its overrides under ours."""
    from trl import GRPOTrainer

    from cells.modeling.grpo_trainer import DriftCallGRPOTrainer

    if base_cls is None or base_cls is GRPOTrainer:
        return DriftCallGRPOTrainer
    if not (isinstance(base_cls, type) and issubclass(base_cls, GRPOTrainer)):
        raise TrainerSetupError(f"base_cls must be trl.GRPOTrainer or a subclass of it, got {base_cls!r}")
    # method resolution: DriftCallGRPOTrainer's overrides, then base_cls's, then GRPOTrainer's
    return type("DriftCallGRPOTrainer", (DriftCallGRPOTrainer, base_cls), {"__doc__": DriftCallGRPOTrainer.__doc__})


def driftcall_grpo_trainer_methods() -> tuple[str, ...]:
    """The TRL methods the subclass overrides."""
    return ("__init__", "_generate_and_score_completions", "_compute_loss", "_get_per_token_logps_and_entropies")


def run(ctx: Context) -> Context:
    """Print the trainer API and the profile's adaptive-KL settings (the trainer itself is built by steps 15-17)."""
    t0 = time.perf_counter()
    profile = ctx.profile
    kl = (f"adaptive KL target={profile.adaptive_kl_target} kp={DEFAULT_KP} "
          f"beta in [{DEFAULT_BETA_MIN}, {profile.adaptive_kl_beta_max}]" if profile.adaptive_kl
          else f"fixed beta={BETA_KL}")
    print(f"[trainer] DriftCallGRPOTrainer overrides {driftcall_grpo_trainer_methods()}; {kl} "
          f"({time.perf_counter() - t0:.3f}s)")
    return ctx


__all__ = [
    "BETA_KL", "DEFAULT_BETA_MAX", "DEFAULT_BETA_MIN", "DEFAULT_KP", "PINNED_SYSTEM_PROMPT", "AdapterRecord",
    "AdaptiveKLCallback", "EnvFactory", "EpisodeDatasetAdapter", "EpisodeSampler", "LanguageCode",
    "RolloutGroupFn", "TrainerSetupError", "driftcall_grpo_trainer_methods", "make_driftcall_grpo_trainer_cls",
    "render_initial_prompt",
]
