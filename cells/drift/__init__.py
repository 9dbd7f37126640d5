"""Generated drift: the families every drift is an instance of, and the splits that hold some out
(docs/design.md "Generated drift"; step 6 is the face: import from `cells.step_06_drift`).

Layout: `families` (cells/data/drift_families.yaml validated on load; every instance a pure function of its id),
`holdout` (a generated split: which instances train, which are held out and why). Both are pure functions of the
fixtures; neither imports step 6, which wraps their instances as catalogue patterns.
"""
