"""``actline demo``: the first thing a newcomer runs.

Today it starts an embedded nats-server with JetStream, connects the typed bus,
serves ``al.turn.submit`` with a responder, round-trips a ``turn.request``
through it and reports what happened. The agent demo (plan, knowledge search,
an outside agent answering DONE, a streamed answer with citations) builds on
this once the actors exist.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from bus import Bus, BusError, EmbeddedNats, Envelope
from messages import Message, ReActProgress, TurnAccepted, TurnRequest, new_id


async def run_demo(nats_url: str | None = None, console: Console | None = None) -> int:
    """Run the demo; returns the exit code (0 on success)."""
    out = console or Console()
    started = time.perf_counter()
    server: EmbeddedNats | None = None
    try:
        if nats_url is None:
            with out.status("starting an embedded nats-server (JetStream on)..."):
                server = await EmbeddedNats().astart()
            nats_url = server.url
            out.print(f"[green]✓[/] nats-server ready at [bold]{nats_url}[/] (pid {server.pid})")
        bus = await Bus.connect(nats_url, name="actline-demo")
    except BusError as exc:
        out.print(Panel(str(exc), title="cannot start", border_style="red"))
        if server is not None:
            server.stop()
        return 1
    try:
        info = await bus.jetstream().account_info()
        out.print(f"[green]✓[/] JetStream on (streams: {info.streams})")
        subjects = bus.subjects
        node = f"demo-node-{new_id()[-6:].lower()}"

        async def take_turn(msg: Message, env: Envelope) -> Message | None:
            if not isinstance(msg, TurnRequest):
                return None
            await bus.publish(
                subjects.stream(msg.conversation_id),
                ReActProgress(
                    conversation_id=msg.conversation_id,
                    turn_id=msg.turn_id,
                    phase="thinking",
                    detail=f"{node} took the turn",
                ),
            )
            return TurnAccepted(conversation_id=msg.conversation_id, turn_id=msg.turn_id, node=node)

        await bus.subscribe(subjects.turn_submit, take_turn, queue="nodes")
        request = TurnRequest(
            conversation_id=new_id("c-"),
            turn_id=new_id("t-"),
            text="What does actline do?",
            config={"max_iterations": 4},
        )
        t0 = time.perf_counter()
        reply = await bus.request(subjects.turn_submit, request, timeout=5)
        rtt_ms = (time.perf_counter() - t0) * 1000
        ok = isinstance(reply, TurnAccepted) and reply.turn_id == request.turn_id
        table = Table(title="turn.request round trip", show_header=False)
        table.add_row("subject", subjects.turn_submit)
        table.add_row("conversation", request.conversation_id)
        table.add_row("turn", request.turn_id)
        table.add_row("reply", f"{reply.kind} from {getattr(reply, 'node', '?')}")
        table.add_row("round trip", f"{rtt_ms:.2f} ms")
        table.add_row("wall time", f"{time.perf_counter() - started:.2f} s")
        out.print(table)
        if not ok:
            out.print(Panel(f"unexpected reply: {reply!r}", border_style="red"))
            return 1
        out.print(
            Panel(
                "The bus works: a typed turn.request went through a real nats-server and "
                "came back as turn.accepted.\nThe decision loop runs on a node: see the README's "
                "Actors section, or python -m actors.node --nats URL.",
                title="actline demo",
                border_style="green",
            )
        )
        return 0
    finally:
        await bus.close()
        if server is not None:
            server.stop()
