"""Each kernel layer ``ACTLINE_SANDBOX`` names, on this machine: a layer it provides runs code
under that layer; a layer it cannot provide is refused with what to install or set, and no
code runs (never a quiet substitute). The other sandbox tests run on the available layers
(``sandbox_modes.AVAILABLE``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from actline.tools.sandbox.confinement import choose
from actline.tools.sandbox.sandbox import SandboxError, run_python

from .sandbox_modes import AVAILABLE, KERNEL_MODES


@pytest.mark.parametrize("mode", KERNEL_MODES)
async def test_a_layer_runs_code_when_available_and_is_refused_with_the_fix_when_not(
    mode: str, tmp_path: Path
) -> None:
    found = choose(mode)
    marker = tmp_path / "ran.txt"
    code = f"open({str(marker)!r}, 'w').write('ran')"
    if mode in AVAILABLE:
        assert found.mode == mode and found.usable
        result = await run_python("print('under', 1)", cwd=tmp_path, sandbox=found, timeout_s=20)
        assert result.ok and result.confinement == mode and result.stdout == "under 1\n"
        return
    assert found.mode == "refused" and not found.usable and found.requested == mode
    assert found.detail  # what to install or set
    with pytest.raises(SandboxError) as info:
        await run_python(code, cwd=tmp_path, sandbox=found, timeout_s=20)
    assert info.value.code == "sandbox_unavailable" and found.detail in str(info.value)
    assert not marker.exists()  # nothing ran
