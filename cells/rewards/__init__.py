"""The reward behind `cells/step_08_rewards.py` (the face; import from there).

Layout: `common` (text normalisation, token matching, episode indexing), `adapters` (the only
place that reads steps 05-07: drift evidence, task rules, documented tool arguments; each
injectable), `components` (r_task, r_constraints, r_format, r_drift) and `penalty` (closed
offence codes, the penalty table, r_penalty).
"""
