"""The `Profile` (every knob, declared once: `profile.py`) and its presets (`presets.py`). Step 2
(`cells/step_02_profiles.py`) is their face: it resolves a preset, applies `--set` and writes the docs tables.
Nothing is re-exported here."""
