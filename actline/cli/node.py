"""``python -m actline.cli.node``: one node process, on the settings of ``actline serve``.

Connects to NATS (``--nats``, else ``NATS_URL``), serves turns until SIGINT or SIGTERM,
then stops cleanly. Settings come as for ``actline serve``: defaults < ``actline.toml`` <
environment < these flags. Prints ``node ID ready`` once it serves.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from actline.actors.configuration.settings_file import load_settings
from actline.actors.errors import SettingsFileError
from actline.actors.node.node import Node
from actline.bus import Bus
from actline.cli.main import model_options
from actline.llm.config import check_servable
from actline.llm.errors import ModelConfigError
from actline.llm.protocol import Model
from actline.llm.reachable import check_reachable
from actline.messages import diag


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m actline.cli.node", description=__doc__)
    parser.add_argument(
        "--nats", default=None, help="NATS URL, several comma-separated (default: NATS_URL)"
    )
    parser.add_argument("--creds", default=None, help="node credentials (ACTLINE_NATS_CREDS)")
    parser.add_argument("--home", type=Path, default=None, help="LMDB folder (ACTLINE_HOME)")
    parser.add_argument("--docs", type=Path, default=None, help="knowledge space folder")
    model_options(parser)
    parser.add_argument("--model-delay", type=float, default=0.0, help="offline model delay")
    parser.add_argument("--node-id", default=None)
    parser.add_argument("--ack-wait", type=float, default=None)
    parser.add_argument("--grace", type=float, default=None, help="followup grace seconds")
    return parser.parse_args(argv)


async def _serve(args: argparse.Namespace) -> int:
    given = {"home": args.home, "knowledge_dir": args.docs, "model": args.model}
    given |= {"api": args.api, "base_url": args.base_url}
    given |= {"node_id": args.node_id, "ack_wait_s": args.ack_wait, "followup_grace_s": args.grace}
    overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    loaded = load_settings(overrides=overrides)  # as `actline serve`: actline.toml, [llm]
    settings = loaded.node
    model: Model | None = None
    if settings.model == "extractive":
        from actline.llm import ExtractiveModel

        model = ExtractiveModel(delay=args.model_delay)
    else:
        check_servable(loaded.llm)  # the fix before connecting (a key, or a base URL)
        await check_reachable(loaded.llm.for_model(settings.model))
    bus = await Bus.connect(args.nats, name=f"actline-node-{settings.node_id}", creds=args.creds)
    node = Node(bus, settings, model=model, llm=loaded.llm)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await node.start()
    print(f"node {settings.node_id} ready", flush=True)
    await stop.wait()
    await node.stop()
    await bus.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    diag.configure_from_env(default_level="INFO")
    try:
        return asyncio.run(_serve(_parse(argv)))
    except (SettingsFileError, ModelConfigError) as exc:
        print(f"python -m actline.cli.node: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
