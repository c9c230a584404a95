"""A nats-server configured with the trust block alone keeps the default 4 KB
``max_control_line``, below a node's CONNECT line (its credentials' JWT): the connection
says that setting must be raised, not that NATS cannot be reached."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from actline.bus import Authority, Bus, ConnectFailed, EmbeddedNats
from actline.bus.errors import ControlLineTooLong

NATS_DEFAULT = 4096
"""nats-server's ``max_control_line`` when its configuration does not set one."""


async def test_a_node_refused_for_its_control_line_is_told_to_raise_max_control_line(
    authority: Authority, tmp_path: Path
) -> None:
    creds = authority.creds_path("node")
    assert creds.stat().st_size > NATS_DEFAULT  # its JWT alone is over the server's default
    plain = EmbeddedNats(
        store_dir=tmp_path / "plain", authority=authority, max_control_line=NATS_DEFAULT
    )
    async with plain:
        url = plain.url
        with pytest.raises(ControlLineTooLong) as caught:
            await Bus.connect(url, creds=creds, connect_attempts=3, reconnect_wait=1.0)
        assert plain.log_path is not None
        log = plain.log_path.read_text()
    error = caught.value
    assert isinstance(error, ConnectFailed)  # callers that catch connect failures still do
    assert (error.url, error.creds) == (url, str(creds))
    assert "max_control_line: 64KB" in str(error)
    assert "cannot reach" not in str(error)
    # not tried again (3 attempts were allowed): the server's setting decides, not a retry
    assert log.count("maximum control line exceeded") == 1, log
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is ControlLineTooLong and vars(back) == vars(error)
    assert str(back) == str(error)

    # The setting the error names lets the same credentials in.
    async with EmbeddedNats(store_dir=tmp_path / "fixed", authority=authority) as fixed:
        bus = await Bus.connect(fixed.url, creds=creds)
        try:
            assert bus.is_connected
        finally:
            await bus.close()
