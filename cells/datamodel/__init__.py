"""The data model's machinery: `codec` (JSON round trip, canonical JSON, model-output rules) and `seeding`
(per-decision RNGs from blake2b). The frozen types live in `cells.step_04_datatypes`, which re-exports these."""
