"""The five mock vendors behind `cells/step_05_vendors.py` (the face; import from there).

Layout: `errors` (closed error codes + hints), `world` (the frozen `World`, flags, listing
helpers), `registry` (argument specs, schema checks, agent-facing docs), one module per vendor
(`airline`, `cab`, `restaurant`, `hotel`, `payment`) holding small tool functions whose
docstrings are written for the agent, and `dispatch` (timeouts, routing, error envelopes).
"""
