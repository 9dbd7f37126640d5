"""DriftCall for TRL's stock `GRPOTrainer(environment_factory=...)`: bring your trainer (docs/trl.md).

    from trl import GRPOConfig, GRPOTrainer
    from cells.trl_env import DriftCallToolEnv, driftcall_reward, seed_dataset, tiny_tool_model

    model, tokenizer = tiny_tool_model()   # or any model whose chat template calls tools
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=driftcall_reward,
                          train_dataset=seed_dataset(8, stage=2), environment_factory=DriftCallToolEnv,
                          args=GRPOConfig(output_dir="out", max_steps=2, num_generations=2))
    trainer.train()

- `environment.py`: `DriftCallToolEnv` (reset, the tools, the conversation actions), `driftcall_reward` (the
  judge's reward), `seed_dataset` (seeded episode rows);
- `tools.py`: the vendor tools as typed, documented methods, generated from the tool registry;
- `chat_template.py`: a tool-calling chat template and response template for the tiny model, whose tool calls
  are DriftCall's action grammar, and `tiny_tool_model`.

Importing this package imports neither torch nor TRL.
"""

from cells.trl_env.chat_template import (
    ACTION_RESPONSE_TEMPLATE,
    TOOL_CHAT_TEMPLATE,
    tiny_tool_model,
    with_tool_calling,
)
from cells.trl_env.environment import (
    DriftCallToolEnv,
    ToolEnvError,
    driftcall_reward,
    finish_episode,
    seed_dataset,
)

__all__ = [
    "ACTION_RESPONSE_TEMPLATE", "TOOL_CHAT_TEMPLATE", "DriftCallToolEnv", "ToolEnvError", "driftcall_reward",
    "finish_episode", "seed_dataset", "tiny_tool_model", "with_tool_calling",
]
