"""Turns on the terminal: progress cards in colour, thinking and the answer streamed live.

``TurnPrinter.show(event)`` takes the events of ``actline.runtime.follow`` in order. Cards:
thinking (gold), tool call (purple), tool result (blue), waiting (orange), complete (green),
notice (red). Thinking streams dim gold under its card; the answer streams in plain text under
an "answer" rule; follow-ups are listed at the end, then what the turn cost in USD and what
prompt caching saved (``cost_line``). ``summary_table`` totals turns.

Canvas: every ``stream.delta`` with a ``key`` (a key of the model's canvas JSON, or a file
written for display) is one titled panel, rendered by the delta's ``format`` (markdown, json
as highlighted JSON, anything else as plain text). On a terminal the panel is redrawn live as
its deltas arrive and stays when the key completes; elsewhere (a pipe, a recording console)
it is printed once, complete. A delta with ``replace`` starts the key's panel over.

Unresolved citations show in the text as ``[?<sid>]`` (the streamer's marker); the
``completed`` delta of a channel or key that had any lists them, and a red line (or the
panel's subtitle) says which SIDs matched no source.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from actline.llm.pricing import format_usd, price
from actline.messages import Cost, ReActProgress, ReActResult, StreamDelta, TurnAccepted

__all__ = [
    "CARD_STYLES",
    "CanvasPanels",
    "TurnPrinter",
    "TurnStats",
    "canvas_panel",
    "cost_line",
    "summary_table",
]

CARD_STYLES: dict[str, tuple[str, str]] = {
    "thinking": ("◆ thinking", "bold gold1"),
    "tool_call": ("▶ tool call", "bold medium_purple1"),
    "tool_result": ("◀ tool result", "bold deep_sky_blue1"),
    "waiting": ("⏳ waiting", "bold dark_orange"),
    "complete": ("✔ complete", "bold green"),
    "notice": ("! notice", "bold red"),
}
STREAMED = {"thinking": "gold1 dim", "answer": ""}


@dataclass
class CanvasPanel:
    """One canvas key as its deltas built it: the text so far, its format, the SIDs its
    completed delta said match no source."""

    text: str = ""
    format: str = ""
    unresolved: list[int] = field(default_factory=list)
    completed: bool = False


@dataclass
class CanvasPanels:
    """A turn's canvas panels from its keyed ``stream.delta`` messages, in the order the
    keys first came: a delta with ``replace`` starts its key over (what the printer draws
    and ``actline ask --json`` prints under ``canvas``)."""

    panels: dict[str, CanvasPanel] = field(default_factory=dict)

    def add(self, delta: StreamDelta) -> CanvasPanel:
        key = delta.key or ""
        panel = self.panels.get(key)
        if panel is None or delta.replace:
            panel = self.panels[key] = CanvasPanel()
        panel.text += delta.text
        panel.format = delta.format or panel.format
        panel.unresolved = list(delta.unresolved) or panel.unresolved
        panel.completed = panel.completed or delta.completed
        return panel

    def as_json(self) -> dict[str, dict[str, Any]]:
        """Key -> ``{"format", "text", "unresolved"}``; a ``json`` panel's text parsed into
        ``value`` as well."""
        out: dict[str, dict[str, Any]] = {}
        for key, panel in self.panels.items():
            row: dict[str, Any] = {"format": panel.format, "text": panel.text}
            if panel.format == "json":
                try:
                    row["value"] = json.loads(panel.text)
                except ValueError:
                    pass  # the text as it came: a canvas that was not JSON
            row["unresolved"] = panel.unresolved
            out[key] = row
        return out


@dataclass(slots=True)
class TurnStats:
    """What one turn cost, for the summary table."""

    rounds: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    seconds: float = 0.0
    status: str = ""
    cost: Cost = field(default_factory=Cost)

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    @property
    def cache_read_pct(self) -> float:
        total = self.prompt_tokens
        return 100.0 * self.cache_read_tokens / total if total else 0.0


@dataclass
class TurnPrinter:
    """Prints one turn's events as they come."""

    console: Console
    show_thinking: bool = True
    open_channel: str = ""
    followups: list[str] = field(default_factory=list)
    answer_started: bool = False
    canvas: CanvasPanels = field(default_factory=CanvasPanels)
    """The canvas panels of this turn so far."""
    _live: Live | None = field(default=None, repr=False)

    def _close(self) -> None:
        self._end_live()
        if self.open_channel:
            self.console.print()
            self.open_channel = ""

    def _end_live(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def show(self, event: Any) -> None:
        if isinstance(event, TurnAccepted):
            self.console.print(Text(f"turn {event.turn_id} accepted by node {event.node}", "dim"))
        elif isinstance(event, ReActProgress):
            self.card(event)
        elif isinstance(event, StreamDelta):
            self.delta(event)
        elif isinstance(event, ReActResult):
            self.result(event)

    def card(self, card: ReActProgress) -> None:
        if card.phase == "thinking" and not self.show_thinking:
            return
        self._close()
        label, style = CARD_STYLES.get(card.phase, (card.phase, "bold"))
        line = Text(f"{label}", style)
        if card.detail:
            line.append(f"  {card.detail}", style=style.replace("bold ", ""))
        self.console.print(line)
        approvals = card.data.get("approvals") if card.phase == "waiting" else None
        if isinstance(approvals, list) and approvals:
            self.approvals(card.turn_id, approvals)

    def approvals(self, turn_id: str, approvals: list[Any]) -> None:
        """The pending approvals of a waiting card, each with the commands that decide it."""
        for item in approvals:
            if not isinstance(item, dict):
                continue
            args = json.dumps(item.get("params", {}), ensure_ascii=False)
            self.console.print(
                Text(f"  needs approval: {item.get('tool')} {args}", "bold dark_orange"),
                soft_wrap=True,
            )
            ref = f"{turn_id} --approval {item.get('approval_id')}"
            self.console.print(
                Text(f"    actline approve {ref}   |   actline deny {ref} --reason ...", "dim"),
                soft_wrap=True,
            )

    def delta(self, delta: StreamDelta) -> None:
        if delta.key is not None:
            self.panel(delta)
            return
        if delta.completed and delta.unresolved:
            self._close()
            sids = ", ".join(str(s) for s in delta.unresolved)
            self.console.print(Text(f"! {delta.channel}: no source for citation(s) {sids}", "red"))
            return
        if delta.channel == "followup":
            if delta.completed:
                return
            self.followups.append(delta.text)
            return
        if delta.channel not in STREAMED or not delta.text:
            return
        if delta.channel == "thinking" and not self.show_thinking:
            return
        if delta.channel == "answer" and not self.answer_started:
            self._close()
            self.console.rule("[bold]answer", style="green")
            self.answer_started = True
        if self.open_channel and self.open_channel != delta.channel:
            self._close()
        self.open_channel = delta.channel
        self.console.print(
            Text(delta.text, STREAMED[delta.channel]), end="", soft_wrap=True, highlight=False
        )

    def panel(self, delta: StreamDelta) -> None:
        """One keyed delta: the key's panel, redrawn live on a terminal (module docstring)."""
        key = delta.key or ""
        if delta.replace or key not in self.canvas.panels:
            self._close()
        panel = self.canvas.add(delta)
        shown = canvas_panel(key, panel.text, delta.format, delta.unresolved)
        if not self.console.is_terminal:
            if delta.completed:
                self.console.print(shown)
            return
        if self._live is None:
            self._live = Live(shown, console=self.console, auto_refresh=False)
            self._live.start()
        self._live.update(shown, refresh=True)
        if delta.completed:
            self._end_live()

    def result(self, result: ReActResult) -> None:
        self._close()
        if result.status != "completed":
            self.console.print(Text(f"turn {result.status}: {result.error or ''}", "bold red"))
        if not self.answer_started and result.answer:
            self.console.rule("[bold]answer", style="green")
            self.console.print(result.answer)
        followups = result.followups or _parse_followups("".join(self.followups))
        if followups:
            self.console.print(Text("follow-ups:", "bold cyan"))
            for item in followups:
                self.console.print(Text(f"  • {item}", "cyan"))
        line = cost_line(result)
        if line is not None:
            self.console.print(line)


def cost_line(result: ReActResult) -> Text | None:
    """``cost $0.0123 · caching saved $0.0310 · priced as claude-sonnet-4-6`` for a turn
    that used tokens (a result without a cost is priced from its usage); None otherwise."""
    u = result.usage
    if u.total_input_tokens + u.output_tokens == 0:
        return None
    cost = result.cost or price(u)
    parts = [
        f"cost {format_usd(cost.total_usd, estimated=cost.estimated)}",
        f"caching saved {format_usd(cost.saved_usd, estimated=cost.estimated)}",
    ]
    if cost.priced_as:
        parts.append(f"priced as {cost.priced_as}")
    if cost.estimated:
        parts.append("estimated: the model is not in the price table")
    return Text(" · ".join(parts), "dim")


def canvas_panel(title: str, text: str, fmt: str, unresolved: Sequence[int] = ()) -> Panel:
    """A titled panel of one canvas key's text in its format."""
    body: RenderableType
    if fmt == "markdown":
        body = Markdown(text)
    elif fmt == "json":
        body = Syntax(text, "json", word_wrap=True)
    else:
        body = Text(text)
    subtitle = None
    if unresolved:
        subtitle = Text("no source for citation(s) " + ", ".join(map(str, unresolved)), "red")
    return Panel(body, title=Text(title, "bold"), subtitle=subtitle, border_style="cyan")


def _parse_followups(text: str) -> list[str]:
    try:
        value = json.loads(text)
    except ValueError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


def summary_table(stats: Sequence[TurnStats], *, where: str, wall_s: float) -> Table:
    """Rounds, tokens in/out, cache read %, cost and what caching saved, wall time, and where
    the timeline is (the command that shows it goes on a line of its own, to be copied)."""
    total = TurnStats()
    for s in stats:
        total.rounds += s.rounds
        total.input_tokens += s.input_tokens
        total.output_tokens += s.output_tokens
        total.cache_read_tokens += s.cache_read_tokens
        total.cache_write_tokens += s.cache_write_tokens
        total.cost = total.cost + s.cost
    table = Table(title="summary", show_header=True, header_style="bold")
    table.add_column("turn", justify="right")
    table.add_column("status")
    table.add_column("rounds", justify="right")
    table.add_column("tokens in", justify="right")
    table.add_column("tokens out", justify="right")
    table.add_column("cache read", justify="right")
    table.add_column("cost", justify="right")
    table.add_column("caching saved", justify="right")
    table.add_column("wall time", justify="right")
    for i, s in enumerate(stats, 1):
        table.add_row(
            str(i),
            s.status,
            str(s.rounds),
            f"{s.prompt_tokens:,}",
            f"{s.output_tokens:,}",
            f"{s.cache_read_pct:.0f}%",
            format_usd(s.cost.total_usd, estimated=s.cost.estimated),
            format_usd(s.cost.saved_usd, estimated=s.cost.estimated),
            f"{s.seconds:.1f} s",
        )
    table.add_row(
        "all",
        "",
        str(total.rounds),
        f"{total.prompt_tokens:,}",
        f"{total.output_tokens:,}",
        f"{total.cache_read_pct:.0f}%",
        format_usd(total.cost.total_usd, estimated=total.cost.estimated),
        format_usd(total.cost.saved_usd, estimated=total.cost.estimated),
        f"{wall_s:.1f} s",
        style="bold",
    )
    table.caption = f"timeline stored in {where}"
    return table


def stats_of(result: ReActResult, seconds: float) -> TurnStats:
    usage = result.usage
    return TurnStats(
        rounds=result.rounds,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_5m_tokens + usage.cache_write_1h_tokens,
        seconds=seconds,
        status=result.status,
        cost=result.cost or price(usage),
    )
