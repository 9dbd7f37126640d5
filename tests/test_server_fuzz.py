"""Schema-driven fuzz of the served HTTP API: schemathesis (CLI) on the server's own OpenAPI, with the
agent token, against the real server on loopback; no request may get a 5xx. ~10 s on 2 cores.

The same run by hand: `DRIFTCALL_TOKEN=... python -m cells serve --port 8000` and
`schemathesis run http://127.0.0.1:8000/openapi.json -H "Authorization: Bearer $DRIFTCALL_TOKEN"
--checks not_a_server_error -n 50`.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import httpx

from tests.test_server import AGENT_H, TOKEN, served


def test_schemathesis_finds_no_server_error(tmp_path: Path) -> None:
    cli = shutil.which("schemathesis") or str(Path(sys.executable).with_name("schemathesis"))
    with served(stage=2) as url:
        paths = set(httpx.get(url + "/openapi.json", headers=AGENT_H).json()["paths"])
        assert paths == {"/health", "/schema", "/metadata", "/state", "/reset", "/step"}
        done = subprocess.run(
            [cli, "run", f"{url}/openapi.json", "-H", f"Authorization: Bearer {TOKEN}", "--checks",
             "not_a_server_error", "-n", "50", "--seed", "1", "--request-timeout", "10"],
            capture_output=True, text=True, timeout=240, cwd=tmp_path,  # its example cache goes there
        )
        assert done.returncode == 0, done.stdout[-3000:]
        assert " passed" in done.stdout and "failed" not in done.stdout.split("SUMMARY")[-1]
        assert httpx.get(url + "/health").status_code == 200
