"""The page in a real browser: Playwright drives Debian's Chromium against the real server.

Types text, clicks Generate, waits for the heatmap and for the audio to play, switches
the predictor to re-prefill (the default on a CPU is KV) and runs again, checks the stats name the predictor, stops a long
request, decodes an uploaded codes file, and saves screenshots under outputs/screenshots/
(git-ignored; scripts/screenshot.sh copies the desktop one to docs/screenshot.png).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

sync_api = pytest.importorskip("playwright.sync_api")

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        "--autoplay-policy=no-user-gesture-required"]
SCREENSHOTS = Path(__file__).resolve().parent.parent / "outputs" / "screenshots"  # never a tracked file
TIMEOUT_MS = 90_000

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}")


@pytest.fixture(scope="module")
def page(app_server, tmp_path_factory):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
        page = context.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(app_server)
        page.locator("#generate").wait_for()
        yield page
        browser.close()


def fill_number(page, elem_id: str, value: int | str) -> None:
    """Type into a number box and leave it, as a person does, and see that the box kept the value (a box
    in an accordion that has just opened can still be re-rendered under a fast typist)."""
    box = page.locator(f"#{elem_id} input")
    sync_api.expect(box).to_be_editable(timeout=TIMEOUT_MS)
    for _ in range(3):
        box.fill(str(value))
        box.press("Tab")
        if box.input_value() == str(value):
            return
        page.wait_for_timeout(200)
    sync_api.expect(box).to_have_value(str(value))


def set_max_frames(page, frames: int) -> None:
    box = page.locator("#max-frames input[type=number]")
    box.fill(str(frames))
    box.press("Enter")


def generate_and_wait(page, predictor_name: str) -> str:
    """Click Generate; wait until the stats panel reports this run finished; return its text."""
    before = page.locator("#stats .stats").inner_text()  # a finished run's timings never repeat exactly
    page.locator("#generate").click()
    page.wait_for_function(
        """([name, before]) => { const s = document.querySelector('#stats .stats')?.innerText || '';
                                 return s !== before && s.includes(name) && s.includes('FIRST AUDIO')
                                        && !s.includes('Generating'); }""",
        arg=[predictor_name, before])
    return page.locator("#stats .stats").inner_text()


def heatmap_title(page) -> str:
    return page.locator("#heatmap .gtitle").text_content() or ""


def test_generate_play_switch_predictor_and_screenshot(page):
    page.locator("#text textarea").fill("Hello from the browser test.")
    set_max_frames(page, 24)

    stats = generate_and_wait(page, "KV cache")  # a CPU's default predictor
    assert "24" in stats
    page.locator("#heatmap .heatmaplayer").wait_for()
    assert "24 frames" in heatmap_title(page)
    # The streamed audio autoplays: wait until the player has actually advanced.
    page.wait_for_function("""() => [...document.querySelectorAll('#audio audio')]
                                   .some(a => a.currentTime > 0 || a.played.length > 0)""")

    page.locator("#predictor").get_by_text("re-prefill", exact=True).click()
    stats = generate_and_wait(page, "re-prefill")
    assert "re-prefill" in stats and "KV cache" not in stats

    page.locator("#view").get_by_text("confidence", exact=True).click()
    page.wait_for_function("() => document.querySelector('#heatmap .gtitle')?.textContent.includes('confidence')")
    page.locator("#view").get_by_text("codes", exact=True).click()
    page.wait_for_function("() => document.querySelector('#heatmap .gtitle')?.textContent.startsWith('codes')")

    page.locator("#listen-button").click()
    page.locator("#audio-k [data-testid=download-link]").wait_for(state="attached")

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "desktop.png"), full_page=True)


def test_fits_a_phone_screen(page):
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.wait_for_timeout(500)
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "phone.png"), full_page=True)
        assert overflow <= 1, f"the page is {overflow}px wider than a 390px phone screen"
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})


class Phases:
    """When each wait of a test began and ended. A wait that fails says so with the waits before it and the
    server's /health (the requests its engine held then): what a wait that timed out was waiting behind."""

    def __init__(self, server: str):
        self.server, self.t0, self.done = server, time.monotonic(), []

    @contextlib.contextmanager
    def __call__(self, name: str):
        start = time.monotonic() - self.t0
        try:
            yield
        except Exception as exc:
            raise AssertionError(f"waiting for {name} (from {start:.1f} s) failed: {type(exc).__name__}; "
                                 f"waits before it: {self.done}; the server's /health: {self.health()}") from exc
        self.done.append(f"{name} {start:.1f}-{time.monotonic() - self.t0:.1f} s")

    def health(self) -> str:
        try:
            with urllib.request.urlopen(self.server.rstrip("/") + "/health", timeout=5) as r:
                return r.read().decode()
        except Exception as exc:  # the server itself not answering is the news
            return f"no answer ({exc!r})"


def test_stop_ends_a_long_request_and_the_next_runs(page, app_server):
    # The slider's most: on a loaded machine the page draws behind the engine, and a shorter request can
    # finish (no "Stopped") before the click reaches it.
    phase = Phases(app_server)
    set_max_frames(page, 1500)
    page.locator("#generate").click()
    with phase("'Generating'"):
        page.wait_for_function("() => document.querySelector('#stats')?.innerText.includes('Generating')")
    with phase("the first frames"):
        page.wait_for_function("() => /[1-9]\\d* frames/.test(document.querySelector('#heatmap .gtitle')?.textContent)")
    page.locator("#stop").click()
    with phase("'Stopped'"):
        page.wait_for_function("() => document.querySelector('#stats')?.innerText.includes('Stopped')", timeout=15_000)
    frames = int(heatmap_title(page).split(" frames")[0].split()[-1])
    assert 0 < frames < 1500

    set_max_frames(page, 12)
    page.locator("#predictor").get_by_text("re-prefill", exact=True).click()  # whatever an earlier test chose
    stats = generate_and_wait(page, "re-prefill")
    assert "12" in stats


def test_upload_codes_file_draws_it_and_a_bad_file_gets_a_message(page, tmp_path):
    codes = np.random.default_rng(0).integers(0, 2048, size=(20, 16))
    good = tmp_path / "codes.json"
    good.write_text(json.dumps({"codes": codes.tolist()}))
    page.locator("#upload-section").get_by_text("Decode a codes file").click()
    page.locator("#upload input[type=file]").set_input_files(str(good))
    page.wait_for_function("() => document.querySelector('#stats')?.innerText.includes('Uploaded codes')")
    assert "20 frames" in heatmap_title(page)

    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((5, 7), np.int64))
    page.locator("#upload button[aria-label='Clear']").first.click()
    page.locator("#upload input[type=file]").set_input_files(str(bad))
    page.get_by_text("shape [frames, 16]").first.wait_for()
