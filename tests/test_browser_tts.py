"""The page on Qwen3-TTS models in a real browser (Playwright driving Debian's Chromium against real
`python app.py` servers started with OMNI_MODEL): speak with a chosen speaker and language, bring your
own audio (upload, encode, round trip, ablation, the heatmap of its codes), compare the recording
with a take of another length, and clone a voice from an uploaded clip on a Base model."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from .test_browser import ARGS, CHROMIUM, SCREENSHOTS, TIMEOUT_MS, heatmap_title, set_max_frames

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}")


def open_page(p, url):
    browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
    page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
    page.set_default_timeout(TIMEOUT_MS)
    page.goto(url)
    page.locator("#generate").wait_for()
    return browser, page


@pytest.fixture(scope="module")
def playwright():
    with sync_api.sync_playwright() as p:  # one per module: two cannot run in one thread
        yield p


@pytest.fixture(scope="module")
def page(playwright, tts_server):
    browser, page = open_page(playwright, tts_server)
    yield page
    browser.close()


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """1 s at 16 kHz, stereo: the page resamples and mixes it down."""
    t = np.arange(16000) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 200 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    path = tmp_path_factory.mktemp("clips") / "voice.wav"
    sf.write(path, np.stack([tone, 0.5 * tone], axis=1).astype(np.float32), 16000)
    return path


def wait_finished(page, before: str) -> str:
    page.wait_for_function("""(before) => { const s = document.querySelector('#stats .stats')?.innerText || '';
                                            return s !== before && s.includes('FIRST AUDIO')
                                                   && !s.includes('Generating'); }""", arg=before)
    return page.locator("#stats .stats").inner_text()


def test_the_page_offers_what_the_model_can_do(page):
    assert page.locator("#speaker").is_visible() and page.locator("#language").is_visible()
    assert page.locator("#text-input").is_visible()
    assert not page.locator("#mode").is_visible()  # no thinker: no chat mode
    assert not page.locator("#instruct").is_visible() and not page.locator("#clone").is_visible()
    assert "Qwen3-TTS" in page.locator("#header").inner_text()


def test_speak_with_a_chosen_speaker_and_language(page):
    page.locator("#text textarea").fill("Hello from a chosen voice.")
    page.locator("#speaker input").click()
    page.get_by_role("option", name="ryan").click()
    page.locator("#language input").click()
    page.get_by_role("option", name="english").click()
    set_max_frames(page, 10)
    before = page.locator("#stats .stats").inner_text()
    page.locator("#generate").click()
    assert "10" in wait_finished(page, before) and "10 frames" in heatmap_title(page)


def test_live_text_is_spoken_while_it_is_still_being_fed(page):
    """Text input 'live': the text fed word by word (1 a second, the slider's least: tiny speaks a word's 4-6 byte
    tokens in well under a second on any of these CPUs; at 2 a second a loaded 2-core Zen 3 worker, 87 ms a frame,
    kept up with the writer and never waited) while the talker speaks: the heatmap and the stats' text grow before
    the text is complete, and the talker's wait for the words shows in the stats."""
    text = "One two three four five six."
    page.locator("#text textarea").fill(text)
    page.locator("#text-input").get_by_label("live").check()
    box = page.locator("#feed-rate input[type=number]")
    box.fill("1")
    box.press("Enter")
    set_max_frames(page, 60)
    before = page.locator("#stats .stats").inner_text()
    page.locator("#generate").click()
    page.wait_for_function("""() => { const s = document.querySelector('#stats .stats')?.innerText || '';
                                      return s.includes('Generating') && s.includes('three'); }""")
    partial = page.locator("#stats .stats").inner_text()
    assert "six." not in partial  # spoken while the text is still coming
    page.locator("#heatmap .heatmaplayer").wait_for()
    stats = wait_finished(page, before)
    assert "WAITED FOR TEXT" in stats.upper() and "six." in stats
    page.screenshot(path=str(SCREENSHOTS / "tts_live_text.png"), full_page=True)
    page.locator("#text-input").get_by_label("streaming").check()


def test_bring_your_own_audio_see_its_codes_and_compare_it(page, clip):
    page.locator("#audio-in input[type=file]").set_input_files(str(clip))
    page.locator("#audio-in audio, #audio-in .waveform-container").first.wait_for(state="attached")
    page.locator("#encode").click()
    page.wait_for_function("() => (document.querySelector('#roundtrip')?.innerText || '').includes('log-mel')")
    assert "13 frames" in heatmap_title(page)  # 1 s at 12.5 frames per second, rounded up
    assert page.locator("#ablation .bars .point").count() == 16  # one bar per codebook
    assert "your recording" in page.locator("#stats").inner_text().lower()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "tts-own-audio.png"), full_page=True)
    page.locator("#pin").click()  # the recording is A; a generated take of another length is B
    page.wait_for_function("() => (document.querySelector('#ab-summary')?.innerText || '').includes('pinned')")
    before = page.locator("#stats .stats").inner_text()
    page.locator("#generate").click()
    wait_finished(page, before)
    page.wait_for_function("() => (document.querySelector('#ab-diff .gtitle')?.textContent || '')"
                           ".includes('lengths differ')")
    assert "different lengths" in page.locator("#ab-summary").inner_text()


@pytest.fixture(scope="module")
def base_page(playwright, tts_base_server):
    browser, page = open_page(playwright, tts_base_server)
    yield page
    browser.close()


def test_clone_a_voice_from_an_uploaded_clip(base_page, clip):
    page = base_page
    assert page.locator("#clone-voice").is_visible() and not page.locator("#speaker").is_visible()
    page.locator("#text textarea").fill("Now in the voice of the clip.")
    set_max_frames(page, 8)
    page.locator("#reference-audio input[type=file]").set_input_files(str(clip))
    page.locator("#reference-text textarea").fill("A tone that hums.")
    before = page.locator("#stats .stats").inner_text()
    page.locator("#generate").click()
    assert "8" in wait_finished(page, before) and "8 frames" in heatmap_title(page)
    # the same from the own-audio panel: the recording is the voice, one click
    page.locator("#audio-in input[type=file]").set_input_files(str(clip))
    page.locator("#clone-text textarea").fill("A tone that hums.")
    before = page.locator("#stats .stats").inner_text()
    page.locator("#clone").click()
    assert "8 frames" in (wait_finished(page, before) and heatmap_title(page))
    page.screenshot(path=str(SCREENSHOTS / "tts-clone.png"), full_page=False)
