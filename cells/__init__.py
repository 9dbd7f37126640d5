"""DriftCall: numbered pipeline steps (`cells/step_NN_*.py`) shared by the notebook, CLI and tests."""

__version__ = "0.1.0"
