"""``actline profiles``: the runtime profiles a turn may name, as this node resolves them.

Shows the built-in profiles and the custom ones of ``actline.toml`` side by side, with the
node's settings that override every profile applied (``actline.actors.configuration.profiles``), and
marks the default (``ACTLINE_PROFILE``). ``actline profiles NAME --json`` prints one resolved
profile as the table a turn request's ``config["profile"]`` accepts.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.table import Table

from actline.actors.configuration.profiles import BUILTIN, KEYS, NODE_KEYS, Profile, resolve
from actline.actors.errors import SettingsError
from actline.errors import ConfigError

from .turns import load_config

__all__ = ["run_profiles"]


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, tuple):
        items = [":".join(v) if isinstance(v, tuple) else v for v in value]
        return ", ".join(items) or "-"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def run_profiles(args: argparse.Namespace, console: Console) -> int:
    config = load_config(args)
    node = config.node
    names = [*BUILTIN, *node.profiles]
    try:
        resolved = {name: resolve(name, node.profiles, node) for name in names}
        if args.name is not None:
            one = resolve(args.name, node.profiles, node, where="profile")
    except SettingsError as exc:
        raise ConfigError(str(exc)) from None
    if args.name is not None:
        if args.json:
            print(json.dumps(one.as_table(), indent=2))
        else:
            _table(console, {args.name: one}, node.profile)
        return 0
    if args.json:
        print(json.dumps({name: p.as_table() for name, p in resolved.items()}, indent=2))
        return 0
    _table(console, resolved, node.profile)
    overridden = [
        f"{key} ({setting})"
        for key, setting in NODE_KEYS.items()
        if getattr(node, setting) != getattr(type(node)(), setting)
    ]
    if overridden:
        console.print(
            "node settings over every profile: " + ", ".join(overridden), style="dim", markup=False
        )
    console.print(
        'a turn names one with config {"profile": NAME} or a table '
        '{"profile": {"extends": NAME, KEY: VALUE}}; custom ones: [profiles.NAME] in actline.toml',
        style="dim",
        markup=False,
    )
    return 0


def _table(console: Console, profiles: dict[str, Profile], default: str) -> None:
    table = Table(title="runtime profiles", title_justify="left")
    table.add_column("key", style="bold", no_wrap=True)
    for name, profile in profiles.items():
        head = f"{name}\n(default)" if name == default else name
        if profile.extends:
            head += f"\nextends {profile.extends}"
        table.add_column(head, justify="right")
    for key in KEYS:
        table.add_row(key, *(_cell(getattr(p, key)) for p in profiles.values()))
    console.print(table)
