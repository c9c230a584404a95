"""Fetch a URL as a source: a page's title and readable text, or a text document as it is.

``fetch`` speaks http and https only (``httpx2``, the HTTP client the Anthropic SDK brings).
Redirects are followed by hand, at most ``MAX_REDIRECTS``, and every hop is checked again
against the scheme rule and ``allowed_hosts``, so a permitted host cannot bounce the request to
one that is not. The body is streamed and reading stops at ``max_bytes``: a longer body is cut
there and the result says ``truncated`` (the first part of a page is still a useful source),
as it does when the extracted text is longer than ``max_chars``.

Types: ``text/html`` and XHTML become the title plus the readable text (script, style, nav and
head dropped, whitespace collapsed, paragraph breaks kept, headings and list items marked in
Markdown style); ``text/plain``, ``text/markdown``, ``text/csv`` and JSON are returned as text.
Anything else is ``FetchError("unsupported_type")``, found from the headers before the body is
read. The charset comes from the Content-Type header, else (HTML) a ``<meta charset>`` in the
first bytes, else UTF-8; undecodable bytes become U+FFFD.

Every failure is a ``FetchError`` whose ``code`` is one of ``FETCH_ERRORS`` and whose message
says what to do. The whole fetch (all hops and the body) runs under ``timeout_s``.

Not done here: there is no block on private or link-local addresses when ``allowed_hosts`` is
None; pass an allow-list wherever the caller's network matters.
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import re
from collections.abc import Collection
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx2

from .errors import ToolError

__all__ = ["FETCH_ERRORS", "FetchError", "FetchResult", "fetch", "html_to_text"]

log = logging.getLogger(__name__)

MAX_REDIRECTS = 5
FETCH_ERRORS: dict[str, str] = {
    "bad_url": "use an absolute http:// or https:// URL",
    "blocked_host": "this host is not on the allow-list; fetch a page from an allowed host",
    "http_error": "the server answered with an error; check the URL or try another source",
    "timeout": "the server did not answer in time; try again later or another source",
    "connect_failed": "the server could not be reached; check the host name",
    "too_many_redirects": f"the URL redirected more than {MAX_REDIRECTS} times; use the final URL",
    "unsupported_type": "only HTML, plain text, Markdown, CSV and JSON can be read",
}
"""Each ``FetchError.code`` with the advice its message ends with."""

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset(
    {"text/plain", "text/markdown", "text/x-markdown", "text/csv", "application/json"}
)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.I)
_SNIFF_BYTES = 2048


class FetchError(ToolError):
    """A URL that could not be fetched as a source: ``code`` (see ``FETCH_ERRORS``), the URL,
    and the HTTP status when the server answered."""

    def __init__(self, code: str, url: str, detail: str = "", status: int | None = None) -> None:
        self.code = code
        self.url = url
        self.detail = detail
        self.status = status
        advice = FETCH_ERRORS.get(code, "")
        text = f"{code}: {url!r}" + (f": {detail}" if detail else "")
        super().__init__(f"{text}; {advice}" if advice else text)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.code, self.url, self.detail, self.status))


@dataclass(frozen=True, slots=True)
class FetchResult:
    """A fetched document: ``url`` as asked, ``final_url`` after redirects, the text read."""

    url: str
    final_url: str
    status: int
    mime: str
    title: str
    text: str
    truncated: bool
    bytes: int
    """Body bytes read (after content decoding), at most ``max_bytes``."""


async def fetch(
    url: str,
    *,
    timeout_s: float = 20.0,
    max_bytes: int = 2_000_000,
    max_chars: int = 50_000,
    allowed_hosts: Collection[str] | None = None,
    user_agent: str = "actline/0.1",
) -> FetchResult:
    """GET ``url`` and return its readable text; raises ``FetchError`` on any failure."""
    allowed = None if allowed_hosts is None else {h.lower().rstrip(".") for h in allowed_hosts}
    _check_url(url, url, allowed)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with asyncio.timeout(timeout_s):
            result = await _fetch(url, timeout_s, max_bytes, max_chars, allowed, user_agent)
    except TimeoutError:
        raise FetchError("timeout", url, f"no complete answer within {timeout_s:g}s") from None
    log.info(
        "fetched from %s status %d %s: %d bytes, %d chars%s in %.3fs",
        urlsplit(result.final_url).hostname,
        result.status,
        result.mime,
        result.bytes,
        len(result.text),
        " (truncated)" if result.truncated else "",
        loop.time() - started,
    )
    return result


async def _fetch(
    url: str,
    timeout_s: float,
    max_bytes: int,
    max_chars: int,
    allowed: set[str] | None,
    user_agent: str,
) -> FetchResult:
    headers = {"User-Agent": user_agent, "Accept": "text/html, text/*;q=0.9, */*;q=0.5"}
    async with httpx2.AsyncClient(
        timeout=httpx2.Timeout(timeout_s), follow_redirects=False, headers=headers
    ) as client:
        current = url
        for _hop in range(MAX_REDIRECTS + 1):
            try:
                async with client.stream("GET", current) as response:
                    if response.is_redirect:  # a 3xx with a Location header
                        current = urljoin(current, response.headers["location"])
                        _check_url(url, current, allowed)
                        continue
                    if response.status_code >= 400:
                        raise FetchError(
                            "http_error",
                            current,
                            f"HTTP {response.status_code} {response.reason_phrase}",
                            response.status_code,
                        )
                    mime, charset = _content_type(response.headers.get("content-type", ""))
                    if mime and mime not in _HTML_TYPES and not _is_text(mime):
                        raise FetchError("unsupported_type", current, f"the content type is {mime}")
                    body, cut = await _read_body(response, max_bytes)
                    status = response.status_code
            except httpx2.TimeoutException as exc:
                raise FetchError("timeout", current, type(exc).__name__) from None
            except httpx2.ConnectError as exc:
                raise FetchError(
                    "connect_failed", current, str(exc) or type(exc).__name__
                ) from None
            except httpx2.UnsupportedProtocol as exc:
                raise FetchError("bad_url", current, str(exc)) from None
            except (httpx2.TransportError, httpx2.DecodingError) as exc:
                raise FetchError(
                    "connect_failed", current, str(exc) or type(exc).__name__
                ) from None
            except httpx2.InvalidURL as exc:
                raise FetchError("bad_url", current, str(exc)) from None
            return _result(url, current, status, mime, charset, body, cut, max_chars)
        raise FetchError("too_many_redirects", url)


def _check_url(asked: str, url: str, allowed: set[str] | None) -> None:
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        port = parts.port
    except ValueError as exc:
        raise FetchError("bad_url", url, str(exc)) from None
    if parts.scheme not in ("http", "https"):
        scheme = parts.scheme or "no scheme"
        raise FetchError("bad_url", url, f"{scheme} URLs cannot be fetched")
    if not host:
        raise FetchError("bad_url", url, "the URL has no host")
    if allowed is not None and host not in allowed and f"{host}:{port}" not in allowed:
        via = "" if url == asked else f" (redirected from {asked!r})"
        raise FetchError("blocked_host", url, f"{host} is not allowed{via}")


def _content_type(header: str) -> tuple[str, str | None]:
    mime, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip("\"'") or None
    return mime.strip().lower(), charset


def _is_text(mime: str) -> bool:
    return mime in _TEXT_TYPES or (mime.startswith("application/") and mime.endswith("+json"))


async def _read_body(response: httpx2.Response, max_bytes: int) -> tuple[bytes, bool]:
    body = bytearray()
    async for chunk in response.aiter_bytes():
        room = max_bytes - len(body)
        if len(chunk) > room:
            body += chunk[:room]
            return bytes(body), True
        body += chunk
    return bytes(body), False


def _decode(body: bytes, charset: str | None, html: bool) -> str:
    if charset is None and html:
        match = _META_CHARSET.search(body[:_SNIFF_BYTES])
        charset = match.group(1).decode("ascii") if match else None
    try:
        codec = codecs.lookup(charset or "utf-8").name
    except LookupError:
        codec = "utf-8"
    return body.decode(codec, "replace")


def _result(
    url: str,
    final_url: str,
    status: int,
    mime: str,
    charset: str | None,
    body: bytes,
    cut: bool,
    max_chars: int,
) -> FetchResult:
    if not mime:
        head = body[:_SNIFF_BYTES].lstrip().lower()
        mime = "text/html" if head.startswith((b"<!doctype html", b"<html")) else "text/plain"
    html = mime in _HTML_TYPES
    decoded = _decode(body, charset, html)
    title, text = html_to_text(decoded) if html else ("", decoded)
    if len(text) > max_chars:
        text, cut = text[:max_chars], True
    return FetchResult(
        url=url,
        final_url=final_url,
        status=status,
        mime=mime,
        title=title,
        text=text,
        truncated=cut,
        bytes=len(body),
    )


# --- HTML to readable text ---------------------------------------------------------------------

_SKIP_TAGS = frozenset(
    {"script", "style", "nav", "head", "noscript", "template", "svg", "iframe", "object", "canvas"}
)
_BLOCK_TAGS = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "dd", "details", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "html", "li",
        "main", "ol", "p", "pre", "section", "summary", "table", "tbody", "td", "th", "thead",
        "tr", "ul", "h1", "h2", "h3", "h4", "h5", "h6",
    }
)  # fmt: skip
_HEADINGS = {f"h{level}": level for level in range(1, 7)}
_SPACE = re.compile(r"\s+")


class _Readable(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.blocks: list[str] = []
        self.parts: list[str] = []
        self.title_parts: list[str] = []
        self.skipping: list[str] = []
        self.in_title = False
        self.pre = 0

    def flush(self) -> None:
        lines = "".join(self.parts).split("\n")
        self.parts = []
        if self.pre:
            text = "\n".join(line.rstrip() for line in lines).strip("\n")
        else:
            text = "\n".join(stripped for line in lines if (stripped := line.strip()))
        if text and text.strip("#- "):
            self.blocks.append(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self.in_title = True
        if tag == "body":
            self.skipping = [t for t in self.skipping if t != "head"]  # an unclosed <head>
        if tag in _SKIP_TAGS:
            self.skipping.append(tag)
            return
        if self.skipping:
            return
        if tag == "br":
            self.parts.append("\n")
        elif tag in _BLOCK_TAGS:
            self.flush()
            if tag == "pre":
                self.pre += 1
            elif tag == "li":
                self.parts.append("- ")
            elif tag in _HEADINGS:
                self.parts.append("#" * _HEADINGS[tag] + " ")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self.in_title = False
        if tag in _SKIP_TAGS:
            if tag in self.skipping:
                while self.skipping.pop() != tag:
                    pass
            return
        if self.skipping:
            return
        if tag in _BLOCK_TAGS:
            self.flush()
            if tag == "pre" and self.pre:
                self.pre -= 1

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.title_parts.append(data)
        if self.skipping:
            return
        self.parts.append(data if self.pre else _SPACE.sub(" ", data))


def html_to_text(html: str) -> tuple[str, str]:
    """``(title, text)`` of an HTML page: the readable text in paragraphs separated by blank
    lines, without scripts, styles, navigation or the head."""
    parser = _Readable()
    parser.feed(html)
    parser.close()
    parser.flush()
    title = _SPACE.sub(" ", "".join(parser.title_parts)).strip()
    return title, "\n\n".join(parser.blocks)
