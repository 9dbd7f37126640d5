"""Scripted players (docs/design.md#8-agent-io): expert, naive, honest failure, random and the probe's exploits.

Every policy answers with text that goes through `DriftCallEnv.step_text`; see `base.py` for the
interface and the perfect-NLU `GoalReader` the scripted players get at reset.
"""

from cells.agent.policies.base import GoalReader, Policy, PolicyNotResetError
from cells.agent.policies.expert import ExpertPolicy
from cells.agent.policies.exploits import EXPLOIT_POLICIES
from cells.agent.policies.naive import HonestFailurePolicy, NaivePolicy
from cells.agent.policies.random_policy import RandomPolicy

__all__ = ["EXPLOIT_POLICIES", "ExpertPolicy", "GoalReader", "HonestFailurePolicy", "NaivePolicy", "Policy",
           "PolicyNotResetError", "RandomPolicy"]
