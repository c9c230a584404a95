"""``actline console`` as a process: the URL line with its token, the cookie, the loopback
guard, and a clean stop on SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from pathlib import Path

import aiohttp

from tests.cli.test_cli import ROOT, run

KB = ROOT / "examples" / "kb"


async def test_the_console_prints_its_url_serves_with_the_token_and_stops_cleanly(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    env.update(PYTHONPATH=str(ROOT), ACTLINE_HOME=str(tmp_path / "home"), ACTLINE_DOCS=str(KB))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "actline", "console", "--port", "0",
        cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        found = re.fullmatch(r"actline console: (http://127\.0\.0\.1:(\d+)/)\?token=(\S+)\n", line)
        assert found is not None, line
        base, port, token = found.groups()
        assert int(port) > 0 and len(token) >= 32
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            async with http.get(base) as res:
                assert res.status == 401 and "token required" in await res.text()
            async with http.get(f"{base}?token={token}") as res:
                assert res.status == 200 and 'data-testid="prompt"' in await res.text()
            async with http.get(f"{base}api/conversations") as res:
                assert res.status == 200 and await res.json() == []
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 30)
    err = (await proc.stderr.read()).decode()
    assert code == 0 and "Traceback" not in err, err


def test_a_remote_host_needs_allow_remote(tmp_path: Path) -> None:
    result = run("console", "--host", "0.0.0.0", "--port", "0", ACTLINE_HOME=str(tmp_path))
    assert result.returncode != 0 and "--allow-remote" in result.stderr + result.stdout
