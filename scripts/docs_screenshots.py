"""Screenshots of the real app for the documentation site (docs/assets/screenshots/*.png).

Starts the app on a free localhost port with the browser tests' helpers (tests/ui/conftest.py: `streamlit run app.py`
headless, through scripts/serve_app.py), drives Debian's headless Chromium with Playwright as a user would, and saves
one PNG per page: Home with a prediction, Relevance maps after Run, Entropy neurons at the last layer, and the SAE
feature browser on one feature of the shipped store. Each PNG is kept under MAX_BYTES (re-encoded with a palette
when the plain PNG is larger). Takes a few minutes on a 2-core CPU (the first model load and the first map).

    nice -n 10 .venv/bin/python scripts/docs_screenshots.py [--only home,relevance] [--out docs/assets/screenshots]
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS, start_app, stop_app, wait_for_app  # noqa: E402

OUT = ROOT / "docs" / "assets" / "screenshots"
MAX_BYTES = 400_000
VIEWPORT = {"width": 1400, "height": 1500}
STORE = "smollm2-135m-blocks.15-gated-4608"
PROMPT = "The capital of France is"
TIMEOUT_MS = 300_000


def goto(page, url: str, path: str, params: dict | None = None) -> None:
    page.goto(f"{url}/{path}" + (f"?{urlencode(params)}" if params else ""))
    wait_for_app(page)


def wait_text(page, text: str) -> None:
    page.wait_for_function("t => document.body.innerText.includes(t)", arg=text, timeout=TIMEOUT_MS)
    wait_for_app(page)


def submit(page, label: str, value: str) -> None:
    """Type into the text box labelled `label` and submit it (Ctrl+Enter in a text area, Enter in an input)."""
    box = page.get_by_role("textbox", name=label, exact=True).first
    box.fill(value)
    box.press("Control+Enter" if box.evaluate("e => e.tagName") == "TEXTAREA" else "Enter")
    try:  # the rerun that hands the value to the app
        page.wait_for_selector("[data-testid='stStatusWidget']", timeout=3_000)
    except Exception:  # noqa: BLE001 - a rerun too quick to see
        pass
    wait_for_app(page)


def home(page, url: str) -> None:
    goto(page, url, "")
    page.wait_for_selector("text=Next token", timeout=TIMEOUT_MS)
    submit(page, "Text", PROMPT)
    page.wait_for_selector(".js-plotly-plot", timeout=TIMEOUT_MS)
    wait_text(page, "Paris")


def relevance(page, url: str) -> None:
    goto(page, url, "relevance-maps")
    submit(page, "Text to explain", PROMPT)
    page.get_by_role("button", name="Run", exact=True).first.click()
    page.wait_for_selector(".relevance-heatmap", timeout=TIMEOUT_MS)
    wait_for_app(page)


def neurons(page, url: str) -> None:
    goto(page, url, "neurons", {"layer": 29})
    wait_text(page, "Layer 29 neurons")
    page.wait_for_selector(".js-plotly-plot", timeout=TIMEOUT_MS)
    wait_for_app(page)


def features(page, url: str) -> None:
    goto(page, url, "feature-browser", {"store": STORE, "view": "Feature", "feature": 2407})
    wait_text(page, "Feature 2407: top and bottom logit weights")


SHOTS = {"home": home, "relevance": relevance, "neurons": neurons, "features": features}
FILES = {"home": "home.png", "relevance": "relevance-maps.png", "neurons": "entropy-neurons.png",
         "features": "sae-feature-browser.png"}


def small_png(data: bytes, limit: int = MAX_BYTES) -> bytes:
    """The PNG as it is when under `limit` bytes, else re-encoded with an adaptive palette (256, then fewer colours)."""
    if len(data) <= limit:
        return data
    from PIL import Image

    image = Image.open(io.BytesIO(data)).convert("RGB")
    for colours in (256, 128, 64):
        buffer = io.BytesIO()
        image.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(buffer, "PNG", optimize=True)
        if buffer.tell() <= limit:
            return buffer.getvalue()
    return buffer.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help=f"comma-separated subset of {', '.join(SHOTS)}")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(SHOTS)
    unknown = set(names) - set(SHOTS)
    if unknown:
        parser.error(f"unknown shot(s): {', '.join(sorted(unknown))}")
    args.out.mkdir(parents=True, exist_ok=True)
    log = ROOT / "build" / "docs-screenshots-server.log"
    log.parent.mkdir(exist_ok=True)
    process, url = start_app(log)
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            for name in names:
                context = browser.new_context(viewport=VIEWPORT)
                page = context.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                SHOTS[name](page, url)
                page.wait_for_timeout(1_000)  # let Plotly finish its transitions
                target = args.out / FILES[name]
                target.write_bytes(small_png(page.screenshot()))
                print(f"{target.relative_to(ROOT)}: {target.stat().st_size:,} bytes", flush=True)
                context.close()
            browser.close()
    finally:
        stop_app(process)
    return 0


if __name__ == "__main__":
    sys.exit(main())
