"""Fixtures of the browser tests: one backend, one console process and one Chromium per
module (starting them is most of the cost), a fresh page per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    Page,
    Playwright,
    expect,
    sync_playwright,
)

from .browser import TIMEOUT, Backend, Console, chromium_args, chromium_path

expect.set_options(timeout=TIMEOUT * 1000)  # a shared, loaded machine: generous, never a sleep


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backend]:
    server = Backend(tmp_path_factory.mktemp("console") / "home").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def console(backend: Backend) -> Iterator[Console]:
    proc = Console(backend.url, backend.home)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def playwright() -> Iterator[Playwright]:
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="module")
def browser(playwright: Playwright) -> Iterator[Browser]:
    chromium = playwright.chromium.launch(
        executable_path=chromium_path(), headless=True, args=chromium_args()
    )
    try:
        yield chromium
    finally:
        chromium.close()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    """A browser context of this test alone (its own cookies)."""
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    ctx.set_default_timeout(TIMEOUT * 1000)
    try:
        yield ctx
    finally:
        ctx.close()


@pytest.fixture
def page(context: BrowserContext, console: Console) -> Iterator[Page]:
    """The console opened with its token (the cookie is set from then on)."""
    tab = context.new_page()
    response = tab.goto(console.url)
    assert response is not None and response.status == 200, console.tail()
    yield tab
