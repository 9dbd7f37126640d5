"""DriftCall as an OpenEnv server (docs/design.md#7-environment): `python -m cells serve`.

    export DRIFTCALL_TOKEN=$(python -c "import secrets; print(secrets.token_urlsafe(32))")
    export DRIFTCALL_JUDGE_TOKEN=$(python -c "import secrets; print(secrets.token_urlsafe(32))")  # optional
    python -m cells serve --stage 2 --port 8000 [--max-sessions 64 --session-ttl 300]
    python -m cells serve --insecure-local          # loopback only, no agent token
    python -m cells serve --stage 2 --env-workers 1 # the sessions' envs in a worker process
    python -m cells bench server                    # throughput and latency against OpenEnv's floor

Pieces: `app.py` (OpenEnv's `create_app` + error handlers + the per-session env factory),
`middleware.py` (`Guard`: request ids, auth, limits, session cap), `session.py` (each WebSocket session:
frame vetting, idle TTL, send timeout, close codes), `workers.py` (envs in worker processes,
`--env-workers`), `client.py`
(`DriftCallClient`, OpenEnv's `EnvClient`; `RemoteDriftCallEnv` for `rollout_batch`).
The manifest is `openenv.yaml` at the repository root. Importing this package is light: OpenEnv
(~4 s, it pulls gradio) loads only when an app or a client is built.
"""

from __future__ import annotations
