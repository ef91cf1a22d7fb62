"""The playground page at `/` in a real browser (Debian's chromium driven by Playwright) against real
draft, verify and gateway processes on the tiny pair: tokens with their sources, compare, errors,
API keys, bad input, a dropped stream; no console error and no request that leaves the origin."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package: `playwright install` cannot download browsers here
# As root on a machine without a display or network: no sandbox, no GPU, nothing phoning home.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KEY = "sk-playground-3c9a"
PROMPT = "Hello! How are you today?"  # the tiny target answers with lookups, draft tokens and its own
TIMEOUT_MS = 60_000
SOURCES = {"draft", "lookup", "prediction", "target"}
expect.set_options(timeout=TIMEOUT_MS)  # generous: the suite shares 2 cores with three services and a browser


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright, tempfile.TemporaryDirectory() as downloads:
        # launch() gives every browser a fresh temporary profile (user-data-dir) of its own
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, downloads_path=downloads)
        yield browser
        browser.close()


@dataclass
class Visit:
    page: Page
    origin: str
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    posts: list[str] = field(default_factory=list)

    def assert_clean(self, allowed_console: tuple[str, ...] = ()) -> None:
        """No console error (but the named ones) and no request to anywhere but the gateway."""
        unexpected = [text for text in self.console_errors if not any(allowed in text for allowed in allowed_console)]
        assert not unexpected, unexpected
        assert self.requests and all(url.startswith(self.origin + "/") for url in self.requests), self.requests


@pytest.fixture
def visit(browser):
    """visit(url) -> the playground at `url` in a fresh context, recording console errors and requests."""
    contexts = []

    def open_page(url: str) -> Visit:
        context = browser.new_context()
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        opened = Visit(page, url)
        page.on("console", lambda message: message.type == "error" and opened.console_errors.append(message.text))
        page.on("pageerror", lambda error: opened.console_errors.append(f"uncaught: {error}"))
        page.on("request", lambda request: opened.requests.append(request.url))
        page.on("request", lambda request: request.method == "POST" and opened.posts.append(request.url))
        page.goto(url + "/")
        return opened

    yield open_page
    for context in contexts:
        context.close()


def _settings(page: Page, **values) -> None:
    for name, value in {"temperature": "0", "max-tokens": "64", "num-draft-tokens": "4", **values}.items():
        page.fill(f"#{name}", value)


def _tokens(page: Page, selector: str = "#output") -> list[dict]:
    return page.eval_on_selector_all(
        f"{selector} .token",
        "els => els.map(e => ({source: e.dataset.source, round: e.dataset.round, text: e.textContent, title: e.title}))",
    )


def _wait_for_tokens(page: Page, count: int = 3) -> None:
    expect(page.locator("#output .token").nth(count - 1)).to_be_attached()  # (the page's CSP forbids wait_for_function's eval)


def _send(page: Page) -> None:
    page.focus("#prompt")
    page.keyboard.press("Enter")
    expect(page.locator("#run")).to_have_attribute("data-state", "done")


def test_tokens_render_with_their_sources_rounds_and_live_stats(visit, process_stack):
    opened = visit(process_stack.url)
    page = opened.page
    page.fill("#prompt", PROMPT)
    _settings(page)
    _send(page)
    tokens = _tokens(page)
    expected = httpx.post(
        f"{process_stack.url}/v1/chat/completions",
        timeout=60,
        json={
            "model": "target",
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 64,
            "temperature": 0,
            "speculative": {"num_draft_tokens": 4, "provenance": True},
        },
    ).json()
    assert page.inner_text("#output") == expected["choices"][0]["message"]["content"]
    assert len(tokens) == len(expected["choices"][0]["provenance"]["tokens"])
    assert {token["source"] for token in tokens} <= SOURCES and len({token["source"] for token in tokens}) > 1, tokens
    assert all(int(token["round"]) >= 1 and token["title"].startswith(f"round {token['round']} ") for token in tokens)
    page.hover("#output .token >> nth=-1")
    expect(page.locator("#hovered")).to_have_text(tokens[-1]["title"])
    rounds = expected["choices"][0]["provenance"]["rounds"]
    stats = expected["speculative"]
    assert page.inner_text("#stat-rounds") == str(len(rounds)) and page.inner_text("#stat-tokens") == str(len(tokens))
    assert f"({stats['accepted_tokens']}/{stats['draft_tokens']})" in page.inner_text("#stat-acceptance")
    assert float(page.inner_text("#stat-accepted-length")) == pytest.approx(len(tokens) / len(rounds), abs=0.01)
    assert float(page.inner_text("#stat-speed")) > 0
    assert page.locator("#acceptance-chart rect.bar").count() == max(r["drafted"] for r in rounds)
    opened.assert_clean()


def test_compare_gives_identical_text_under_greedy_and_times_both(visit, process_stack):
    opened = visit(process_stack.url)
    page = opened.page
    page.fill("#prompt", PROMPT)
    _settings(page)
    page.click("#compare")
    expect(page.locator("#comparison")).to_have_attribute("data-state", "done")
    expect(page.locator("#verdict")).to_have_attribute("data-identical", "true")
    assert page.inner_text("#output-on") == page.inner_text("#output-off") != ""
    assert {token["source"] for token in _tokens(page, "#output-off")} == {"target"}
    assert len({token["source"] for token in _tokens(page, "#output-on")}) > 1
    for side in ("on", "off"):
        assert "tok/s" in page.inner_text(f"#timing-{side}")
    assert page.get_attribute("#comparison", "aria-busy") == "false"
    opened.assert_clean()


def test_coupled_compare_uses_one_seed_for_both_sides(visit, process_stack):
    opened = visit(process_stack.url)
    page = opened.page
    page.fill("#prompt", PROMPT)
    _settings(page, temperature="0.9")
    page.select_option("#acceptance", "coupled")
    page.click("#compare")
    expect(page.locator("#verdict")).to_have_attribute("data-identical", "true")
    assert page.inner_text("#output-on") == page.inner_text("#output-off")
    opened.assert_clean()


def test_a_running_region_is_busy_and_stop_ends_it(cutting_proxy, visit):
    opened = visit(cutting_proxy(pass_events=6).url)  # the stream stalls after its first rounds
    page = opened.page
    page.fill("#prompt", PROMPT)
    _settings(page)
    page.click("#send")
    _wait_for_tokens(page)
    expect(page.locator("#run")).to_have_attribute("aria-busy", "true")
    page.click("#stop")
    expect(page.locator("#run")).to_have_attribute("data-state", "stopped")
    assert page.get_attribute("#run", "aria-busy") == "false"
    expect(page.locator("#message")).to_contain_text("Stopped")
    assert 3 <= len(_tokens(page)) < 64
    opened.assert_clean()


def test_bad_input_shows_a_message_and_sends_nothing(visit, process_stack):
    opened = visit(process_stack.url)
    page = opened.page
    expect(page.locator("#max-tokens-hint")).to_contain_text("512")  # the tiny model's context, from /v1/models
    page.focus("#prompt")
    page.keyboard.press("Enter")
    expect(page.locator("#message")).to_contain_text("Enter a prompt")
    assert page.get_attribute("#prompt", "aria-invalid") == "true"
    page.fill("#prompt", "   ")
    page.click("#compare")
    expect(page.locator("#message")).to_contain_text("Enter a prompt")
    page.fill("#prompt", "line one")
    page.focus("#prompt")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("line two")
    assert page.input_value("#prompt") == "line one\nline two"  # Shift+Enter is a newline, not a send
    page.fill("#max-tokens", "600")
    page.keyboard.press("Enter")
    page.focus("#prompt")
    page.keyboard.press("Enter")
    expect(page.locator("#message")).to_contain_text("beyond this model's limit of 512")
    assert page.get_attribute("#max-tokens", "aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == "max-tokens"
    assert opened.posts == [] and _tokens(page) == []
    opened.assert_clean()


def test_every_control_has_a_label_and_focus_follows_the_page(visit, process_stack):
    page = visit(process_stack.url).page
    unlabelled = page.eval_on_selector_all("input, select, textarea", "els => els.filter(e => e.labels.length === 0).map(e => e.id)")
    assert unlabelled == []
    page.focus("#prompt")
    order = []
    for _ in range(11):
        page.keyboard.press("Tab")
        order.append(page.evaluate("document.activeElement.id"))
    assert (
        order
        == [
            "send",
            "compare",
            "api-key",
            "model",
            "temperature",
            "seed",
            "num-draft-tokens",
            "max-tokens",
            "acceptance",
            "speculative",
            "",
        ][: len(order)]
    )


@pytest.fixture(scope="module")
def keyed_url(start_gateway):
    return start_gateway({"SPECDEC_API_KEYS": KEY})


def test_a_wrong_key_shows_the_error(visit, keyed_url):
    opened = visit(keyed_url)
    page = opened.page
    expect(page.locator("#message")).to_contain_text("needs an API key")
    page.fill("#api-key", "sk-wrong")
    page.fill("#prompt", PROMPT)
    page.keyboard.press("Enter")
    expect(page.locator("#message")).to_contain_text("401 Unauthorized")
    assert _tokens(page) == []
    opened.assert_clean(allowed_console=("status of 401",))


def test_the_page_works_with_api_keys_on_and_keeps_the_key_out_of_urls(visit, keyed_url):
    page_response = httpx.get(f"{keyed_url}/", timeout=10)  # the page itself needs no key
    assert page_response.status_code == 200 and "default-src 'none'" in page_response.headers["content-security-policy"]
    opened = visit(keyed_url)
    page = opened.page
    expect(page.locator("#message")).to_contain_text("needs an API key")
    authorized = []
    page.on("request", lambda request: authorized.append(request.headers.get("authorization")) if "/v1/" in request.url else None)
    page.fill("#api-key", KEY)
    page.press("#api-key", "Tab")  # change: the models load with the key
    expect(page.locator("#model")).to_have_value("target")
    expect(page.locator("#message")).to_be_hidden()
    page.fill("#prompt", PROMPT)
    _settings(page)
    _send(page)
    assert len({token["source"] for token in _tokens(page)}) > 1
    assert authorized and set(authorized) == {f"Bearer {KEY}"}
    page.reload()
    assert page.input_value("#api-key") == KEY and page.evaluate("sessionStorage.getItem('specdec.apiKey')") == KEY
    assert page.evaluate("document.cookie") == "" and not any(KEY in request for request in opened.requests)
    opened.assert_clean(allowed_console=("status of 401",))  # the first models call, before the key was given


def test_too_many_requests_is_shown(visit, start_gateway):
    opened = visit(start_gateway({"SPECDEC_SERVING__RATE_LIMIT_RPM": "1"}))
    page = opened.page
    page.fill("#prompt", PROMPT)
    _settings(page, **{"max-tokens": "8"})
    _send(page)
    page.keyboard.press("Enter")
    expect(page.locator("#run")).to_have_attribute("data-state", "failed")
    expect(page.locator("#message")).to_contain_text("429 Too many requests")
    opened.assert_clean(allowed_console=("status of 429",))


def test_a_connection_dropped_mid_stream_shows_that_the_stream_ended_early(cutting_proxy, visit):
    proxy = cutting_proxy(pass_events=6)
    opened = visit(proxy.url)
    page = opened.page
    page.fill("#prompt", PROMPT)
    _settings(page)
    page.click("#send")
    _wait_for_tokens(page)
    proxy.cut()
    expect(page.locator("#run")).to_have_attribute("data-state", "failed")
    expect(page.locator("#message")).to_contain_text("The stream ended early")
    assert 3 <= len(_tokens(page)) < 64
    opened.assert_clean(allowed_console=("net::ERR_INCOMPLETE_CHUNKED_ENCODING",))
