"""The data model's machinery: `codec` (JSON round trip, canonical JSON, model-output rules), `seeding`
(per-decision RNGs from blake2b) and `formats` (dates and times as an API documents them: "DD-MM-YYYY"). The
frozen types live in `cells.step_04_datatypes`, which re-exports the first two."""
