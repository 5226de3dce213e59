"""`python explorer_page.py CHROMIUM ARGS_JSON URL`: load the Cache Explorer's page in headless Chromium, wait for its
widgets, print what rendered as one JSON object (the HTTP status, the Run button's label, the model dropdown's
value and choices, every response of 400 or more, whether the page is an error page).

A process of its own, run by tests/packaging/test_extras.py: Playwright's sync API allows one instance per
process, and the browser tests' session-wide one may be alive in the same pytest worker. Like their `page`
fixture, the page can reach 127.0.0.1 only.
"""

from __future__ import annotations

import json
import sys

from playwright.sync_api import sync_playwright


def main(chromium: str, args: list[str], url: str) -> dict:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=args, headless=True)
        page = browser.new_page()
        page.route(lambda u: not u.startswith("http://127.0.0.1:"), lambda route: route.abort())
        page.route_web_socket(lambda u: not u.startswith("ws://127.0.0.1:"), lambda ws: ws.close())
        page.set_default_timeout(120_000)  # the first view starts a kernel that imports torch
        failed: list[str] = []
        page.on("response", lambda r: failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
        status = page.goto(url).status
        explorer = page.locator(".kvlab-explorer").first
        explorer.wait_for()
        run = explorer.locator("button.kvlab-run")
        run.wait_for(state="visible")
        model = explorer.locator(".kvlab-model select")
        model.wait_for(state="visible")
        seen = {
            "status": status,
            "run": run.inner_text(),
            "model": model.input_value(),
            "models": model.locator("option").all_text_contents(),
            "failed": failed,
            "error_page": "Internal Server Error" in page.content(),
        }
        browser.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], json.loads(sys.argv[2]), sys.argv[3])))
