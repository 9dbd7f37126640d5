"""The KL coefficient: its initial value (`BETA_KL`) and `AdaptiveKLCallback`, the controller that retargets it.

`beta *= exp(clamp(kp * (kl - target) / target, +-50))`, clamped to `[beta_min, beta_max]`, on each log that carries
`kl`; it writes the trainer's `beta` (what TRL's loss reads) as well as `args.beta`. With peft the reference is the
adapter-disabled base model, so beta may change at any time; TRL only logs `kl` when beta != 0, so a run started at
beta 0 stays there. Step 13's `GRPOConfig` starts at `BETA_KL`; step 14 re-exports both.
"""

from __future__ import annotations

import math
from typing import Any

BETA_KL: float = 0.04  # initial KL coefficient (fixed by the design); AdaptiveKLCallback retargets it
DEFAULT_BETA_MIN: float = 0.001
DEFAULT_BETA_MAX: float = 1.0
DEFAULT_KP: float = 2.0


class AdaptiveKLCallback:
    """Proportional log-space controller retargeting beta to the measured KL on every `on_log`.

    A duck-typed `transformers.TrainerCallback` (every other `on_*` event is a no-op), so importing this
    module never imports transformers. Pass `trainer=` (the trainer does) so the update reaches
    `trainer.beta`, which TRL's loss reads; `args.beta` is kept in step.
    """

    def __init__(self, target_kl: float = BETA_KL, *, kp: float = DEFAULT_KP, beta_min: float = DEFAULT_BETA_MIN,
                 beta_max: float = DEFAULT_BETA_MAX, trainer: Any = None) -> None:
        if not target_kl > 0.0:
            raise ValueError(f"target_kl must be > 0; got {target_kl}")
        if not (beta_min > 0.0 and beta_max > 0.0):
            raise ValueError(f"beta bounds must be > 0; got min={beta_min}, max={beta_max}")
        if beta_min > beta_max:
            raise ValueError(f"beta_min ({beta_min}) must be <= beta_max ({beta_max})")
        self.target_kl, self.kp = float(target_kl), float(kp)
        self.beta_min, self.beta_max = float(beta_min), float(beta_max)
        self.trainer = trainer

    def __getattr__(self, name: str) -> Any:
        if name.startswith("on_"):  # every other TrainerCallback event: no-op
            return lambda *args, **kwargs: None
        raise AttributeError(name)

    @staticmethod
    def _coerce_kl(raw: Any) -> float | None:
        if isinstance(raw, bool):
            return None
        try:
            value = float(raw)
        except (TypeError, ValueError):
            return None
        return value if math.isfinite(value) else None

    def _next_beta(self, beta: float, kl: float) -> tuple[float, bool, bool]:
        """`(new_beta, clamped_to_min, clamped_to_max)`."""
        exponent = max(-50.0, min(50.0, self.kp * (kl - self.target_kl) / self.target_kl))
        scaled = beta * math.exp(exponent)
        if scaled <= self.beta_min:
            return self.beta_min, True, False
        if scaled >= self.beta_max:
            return self.beta_max, False, True
        return scaled, False, False

    def on_log(self, args: Any, state: Any, control: Any, *, logs: dict[str, Any] | None = None,
               **_kwargs: Any) -> Any:
        """Update beta from `logs["kl"]` and add the five `train/*` diagnostics; no-op on bad input."""
        if logs is None or "kl" not in logs:
            return control
        kl = self._coerce_kl(logs["kl"])
        if kl is None:
            return control
        current = getattr(self.trainer, "beta", None) if self.trainer is not None else None
        beta = float(current if current is not None else getattr(args, "beta", BETA_KL))
        new_beta, low, high = self._next_beta(beta, kl)
        args.beta = new_beta
        if self.trainer is not None:
            self.trainer.beta = new_beta
        extra = {"train/beta_adaptive": new_beta, "train/kl_measured": kl, "train/kl_target": self.target_kl,
                 "train/beta_clamped_to_min": int(low), "train/beta_clamped_to_max": int(high)}
        logs.update(extra)
        history = getattr(state, "log_history", None)
        if history and history[-1].get("kl") == logs["kl"]:  # Trainer.log stored a copy before calling us
            history[-1].update(extra)
        return control
