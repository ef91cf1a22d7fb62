"""Screenshot the playground after a real run: docs/playground.png.

Usage: python scripts/playground_screenshot.py --url http://localhost:8000 [--out docs/playground.png]
against a running stack (`specdec up`), with Debian's chromium (see docs/testing.md).
"""

from __future__ import annotations

import argparse

from playwright.sync_api import expect, sync_playwright

PROMPT = "Here is a function:\n\ndef mean(values):\n    return sum(values) / len(values)\n\nAdd a docstring and handle the empty list."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://localhost:8000")
    parser.add_argument("--out", default="docs/playground.png")
    parser.add_argument("--max-tokens", default="90")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1320, "height": 900}, device_scale_factor=1)
        page.set_default_timeout(300_000)
        expect.set_options(timeout=300_000)
        page.goto(args.url + "/")
        expect(page.locator("#model option").first).to_be_attached()
        page.fill("#prompt", PROMPT)
        page.fill("#max-tokens", args.max_tokens)
        page.click("#compare")
        expect(page.locator("#comparison")).to_have_attribute("data-state", "done")
        page.click("#send")
        expect(page.locator("#run")).to_have_attribute("data-state", "done")
        page.hover("#output .token:not([data-source='target']) >> nth=3")  # outlines that token's round
        page.screenshot(path=args.out, full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
