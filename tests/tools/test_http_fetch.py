"""actline.tools.http_fetch.fetch against a real HTTP server on 127.0.0.1 (asyncio streams, port 0).

The server speaks just enough HTTP/1.1 for the client: one request per connection, a fixed
response per path. ``/hang`` reads until the client gives up, so the timeout test waits on the
client's own timeout and nothing else.
"""

from __future__ import annotations

import asyncio
import pickle
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest

from actline.tools.http_fetch import FETCH_ERRORS, FetchError, fetch, html_to_text

PAGE = b"""<!DOCTYPE html>
<html><head><title>  The   Title </title>
<style>body { color: red }</style><script>var secret = "do not show";</script></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About</a></nav>
<h1>Main heading</h1>
<p>First   paragraph
   spans lines &amp; has an entity.</p>
<div>Second <b>block</b><br>with a break</div>
<ul><li>one</li><li>two</li></ul>
<script>document.write("nope")</script>
<pre>  keep
    indent</pre>
</body></html>"""


@dataclass
class Server:
    host: str
    port: int
    requests: list[str] = field(default_factory=list)

    def url(self, path: str, host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"


def response(
    status: str, body: bytes = b"", content_type: str | None = None, **headers: str
) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Length: {len(body)}", "Connection: close"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    lines += [f"{name.replace('_', '-')}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


@pytest.fixture(autouse=True)
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server("127.0.0.1", 0)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode()
            state.requests.append(path)
            if path == "/hang":
                await reader.read()  # until the client closes the connection
                return
            if path == "/big":
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                    b"Content-Length: 5000000\r\nConnection: close\r\n\r\n"
                )
                for _ in range(50):
                    writer.write(b"abcdefghij" * 10_000)
                    await writer.drain()
                return
            writer.write(routes(state).get(path, response("404 Not Found", b"no such page")))
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.port = listener.sockets[0].getsockname()[1]
    async with listener:
        yield state


def routes(server: Server) -> dict[str, bytes]:
    latin = "Café crème, déjà vu".encode("latin-1")
    return {
        "/page.html": response("200 OK", PAGE, "text/html; charset=utf-8"),
        "/meta.html": response(
            "200 OK",
            '<html><head><meta charset="iso-8859-1"><title>Été</title></head>'
            "<body><p>Voilà</p></body></html>".encode("latin-1"),
            "text/html",
        ),
        "/plain.txt": response("200 OK", latin, "text/plain; charset=ISO-8859-1"),
        "/notes.md": response("200 OK", "# Notes\n\n- ✓ done\n".encode(), "text/markdown"),
        "/data.json": response("200 OK", b'{"a": [1, 2]}', "application/json"),
        "/broken.txt": response("200 OK", b"ok \xff\xfe bytes", "text/plain"),
        "/image.png": response("200 OK", b"\x89PNG\r\n", "image/png"),
        "/redirect": response("302 Found", b"", "text/plain", Location="/page.html"),
        "/redirect-twice": response("301 Moved", b"", Location=server.url("/redirect")),
        "/redirect-localhost": response(
            "302 Found", b"", Location=server.url("/page.html", host="localhost")
        ),
        "/redirect-ftp": response("302 Found", b"", Location="ftp://127.0.0.1/file"),
        "/loop": response("302 Found", b"", Location="/loop"),
        "/gone": response("410 Gone", b"gone for good", "text/plain"),
    }


# --- documents ----------------------------------------------------------------------------------


async def test_an_html_page_gives_its_title_and_readable_text(server: Server) -> None:
    page = await fetch(server.url("/page.html"))
    assert (page.status, page.mime, page.title) == (200, "text/html", "The Title")
    assert page.url == page.final_url == server.url("/page.html")
    assert page.text == (
        "# Main heading\n\n"
        "First paragraph spans lines & has an entity.\n\n"
        "Second block\nwith a break\n\n"
        "- one\n\n- two\n\n"
        "  keep\n    indent"
    )
    assert "secret" not in page.text and "Home" not in page.text and "color" not in page.text
    assert page.bytes == len(PAGE) and not page.truncated


async def test_a_meta_charset_decodes_an_html_page_without_one_in_the_header(
    server: Server,
) -> None:
    page = await fetch(server.url("/meta.html"))
    assert (page.title, page.text) == ("Été", "Voilà")


async def test_plain_text_uses_the_charset_from_the_header(server: Server) -> None:
    page = await fetch(server.url("/plain.txt"))
    assert (page.mime, page.title, page.text) == ("text/plain", "", "Café crème, déjà vu")


@pytest.mark.parametrize(
    ("path", "mime", "text"),
    [
        ("/notes.md", "text/markdown", "# Notes\n\n- ✓ done\n"),
        ("/data.json", "application/json", '{"a": [1, 2]}'),
        ("/broken.txt", "text/plain", "ok \ufffd\ufffd bytes"),
    ],
    ids=["markdown", "json", "bad-bytes"],
)
async def test_text_documents_are_returned_as_they_are(
    server: Server, path: str, mime: str, text: str
) -> None:
    page = await fetch(server.url(path))
    assert (page.mime, page.text) == (mime, text)


async def test_a_redirect_is_followed_and_the_final_url_reported(server: Server) -> None:
    page = await fetch(server.url("/redirect-twice"))
    assert page.url == server.url("/redirect-twice")
    assert page.final_url == server.url("/page.html") and page.title == "The Title"
    assert server.requests == ["/redirect-twice", "/redirect", "/page.html"]


async def test_a_body_over_max_bytes_is_cut_and_flagged(server: Server) -> None:
    page = await fetch(server.url("/big"), max_bytes=100_000, max_chars=200_000)
    assert page.truncated and page.bytes == 100_000
    assert page.text == ("abcdefghij" * 10_000)


async def test_text_over_max_chars_is_cut_and_flagged(server: Server) -> None:
    page = await fetch(server.url("/plain.txt"), max_chars=4)
    assert page.text == "Café" and page.truncated


# --- failures -----------------------------------------------------------------------------------


async def test_a_404_is_an_http_error_with_the_status(server: Server) -> None:
    with pytest.raises(FetchError) as missing:
        await fetch(server.url("/missing"))
    assert (missing.value.code, missing.value.status) == ("http_error", 404)
    assert "HTTP 404" in str(missing.value) and FETCH_ERRORS["http_error"] in str(missing.value)
    with pytest.raises(FetchError) as gone:
        await fetch(server.url("/gone"))
    assert gone.value.status == 410


async def test_an_unsupported_type_is_refused_before_the_body(server: Server) -> None:
    with pytest.raises(FetchError) as error:
        await fetch(server.url("/image.png"))
    assert error.value.code == "unsupported_type" and "image/png" in str(error.value)


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://127.0.0.1/x",
        "javascript:alert(1)",
        "http:///path",
        "example.com",
    ],
)
async def test_a_url_that_is_not_http_is_a_bad_url(url: str) -> None:
    with pytest.raises(FetchError) as error:
        await fetch(url)
    assert error.value.code == "bad_url" and error.value.url == url


async def test_a_redirect_to_another_scheme_is_a_bad_url(server: Server) -> None:
    with pytest.raises(FetchError) as error:
        await fetch(server.url("/redirect-ftp"))
    assert error.value.code == "bad_url" and error.value.url == "ftp://127.0.0.1/file"


async def test_a_host_off_the_allow_list_is_blocked(server: Server) -> None:
    with pytest.raises(FetchError) as error:
        await fetch(server.url("/page.html"), allowed_hosts={"example.com"})
    assert error.value.code == "blocked_host"
    assert server.requests == []


async def test_a_redirect_to_a_host_off_the_allow_list_is_blocked(server: Server) -> None:
    allowed = {"127.0.0.1"}
    assert (await fetch(server.url("/redirect"), allowed_hosts=allowed)).title == "The Title"
    with pytest.raises(FetchError) as error:
        await fetch(server.url("/redirect-localhost"), allowed_hosts=allowed)
    assert error.value.code == "blocked_host" and "localhost" in str(error.value)
    assert "redirected from" in str(error.value)
    assert server.requests == ["/redirect", "/page.html", "/redirect-localhost"]


async def test_a_redirect_loop_stops(server: Server) -> None:
    with pytest.raises(FetchError) as error:
        await fetch(server.url("/loop"))
    assert error.value.code == "too_many_redirects"
    assert server.requests == ["/loop"] * 6


async def test_a_server_that_never_answers_times_out(server: Server) -> None:
    with pytest.raises(FetchError) as error:
        await fetch(server.url("/hang"), timeout_s=0.5)
    assert error.value.code == "timeout"


async def test_a_closed_port_is_connect_failed() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens once the socket is closed
    with pytest.raises(FetchError) as error:
        await fetch(f"http://127.0.0.1:{port}/")
    assert error.value.code == "connect_failed"


def test_a_fetch_error_pickles_with_its_fields() -> None:
    error = pickle.loads(pickle.dumps(FetchError("http_error", "http://x/", "HTTP 500", 500)))
    assert (error.code, error.url, error.detail, error.status) == (
        "http_error",
        "http://x/",
        "HTTP 500",
        500,
    )
    assert str(error).startswith("http_error: 'http://x/': HTTP 500;")


# --- the HTML reader ----------------------------------------------------------------------------


def test_html_without_a_closed_head_still_reads_the_body() -> None:
    title, text = html_to_text("<html><head><title>T</title><body><p>Body text</p>")
    assert (title, text) == ("T", "Body text")


def test_nested_skipped_tags_do_not_leak_text() -> None:
    html = "<p>a</p><nav><div><script>x</script>menu</div></nav><p>b</p><noscript>js</noscript>"
    assert html_to_text(html) == ("", "a\n\nb")
