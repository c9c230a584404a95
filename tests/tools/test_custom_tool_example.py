"""``examples/custom_tool.py`` runs as written, offline, and answers from its tool."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_tool.py"


def test_the_custom_tool_example_answers_from_its_tool_and_its_hook_refuses(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACTLINE_", "ANTHROPIC_"))}
    out = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert "A: It is 18 degrees C and sunny in Paris." in out.stdout
    assert "refused by pre hook no_imaginary_places: Atlantis is not on the map" in out.stdout
    assert (
        "weather.current {'city': 'Paris'} -> It is 18 degrees C and sunny in Paris." in out.stdout
    )
    assert "'city': 'Atlantis'" not in out.stdout.split("Calls that ran:")[1]
