"""The one base class of every error DriftCall raises on purpose.

Each project error also keeps its conventional built-in base (`ValueError` for bad input,
`RuntimeError` for a wrong order of operations, `KeyError`/`LookupError` for missing entries), so
callers may catch either. The CLI prints a `DriftCallError` as one line and exits 2; any other
exception (a bug, or an error from torch or TRL) keeps its full traceback.
"""

from __future__ import annotations


class DriftCallError(Exception):
    """Base of the project's own errors: the message says what happened and what to do."""
