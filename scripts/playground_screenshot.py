"""Screenshot the playground after a real run: docs/playground.png.

Usage: python scripts/playground_screenshot.py --url http://localhost:8000 [--out docs/playground.png]
against a running stack (`specdec up`), with Debian's chromium (see the README's tests section).
"""

from __future__ import annotations

import argparse

from playwright.sync_api import expect, sync_playwright

PROMPT = ("Summarise in two sentences: Speculative decoding lets a small draft model propose several tokens, "
          "which a larger target model then checks in one forward pass. When the draft agrees with the target, "
          "many tokens are accepted at once; when it disagrees, the target's own token is used and nothing is lost.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://localhost:8000")
    parser.add_argument("--out", default="docs/playground.png")
    parser.add_argument("--max-tokens", default="80")
    args = parser.parse_args()
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1320, "height": 900}, device_scale_factor=1)
        page.set_default_timeout(300_000)
        page.goto(args.url + "/")
        expect(page.locator("#model option").first).to_be_attached()
        page.fill("#prompt", PROMPT)
        page.fill("#max-tokens", args.max_tokens)
        page.click("#compare")
        expect(page.locator("#comparison")).to_have_attribute("data-state", "done")
        page.click("#send")
        expect(page.locator("#run")).to_have_attribute("data-state", "done")
        page.hover("#output .token[data-source='lookup'] >> nth=0")
        page.screenshot(path=args.out, full_page=True)
        browser.close()


if __name__ == "__main__":
    main()
