"""A score for any take, in a real browser (Playwright driving Debian's Chromium against a real tiny-tts
server): encode a clip, see that its confidence view has nothing yet, type what it says, press Score this
take, and find the probabilities in the confidence view and the inspector (p column and top-5
alternatives); then set one code by code surgery and find that cell's p before → after in the edit log."""

from __future__ import annotations

import os

import pytest

from .test_browser import CHROMIUM, SCREENSHOTS, fill_number, heatmap_title
from .test_browser_tts import clip, open_page, playwright  # noqa: F401 (fixtures)

sync_api = pytest.importorskip("playwright.sync_api")
pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}")


@pytest.fixture(scope="module")
def page(playwright, tts_server):  # noqa: F811
    browser, page = open_page(playwright, tts_server)
    yield page
    browser.close()


def test_encode_a_clip_score_it_and_see_an_edit_scored(page, clip):  # noqa: F811
    page.locator("#audio-in input[type=file]").set_input_files(str(clip))
    page.locator("#audio-in audio, #audio-in .waveform-container").first.wait_for(state="attached")
    page.locator("#encode").click()
    page.wait_for_function("() => (document.querySelector('#roundtrip')?.innerText || '').includes('log-mel')")
    page.wait_for_function("() => (document.querySelector('#score-status')?.innerText || '').includes('Not scored')")
    page.locator("#view").get_by_text("confidence", exact=True).click()
    page.wait_for_function("() => (document.querySelector('#heatmap')?.innerText || '').includes('Score this take')")
    assert "<td class=\"p\">–</td>" in page.locator("#inspector").inner_html()  # no probabilities yet

    page.locator("#text textarea").fill("A tone that hums.")  # what the clip "says"
    page.locator("#score-take").click()
    page.wait_for_function("() => (document.querySelector('#score-status')?.innerText || '').includes('Scored 13')")
    assert "A tone that hums." in page.locator("#score-status").inner_text()
    page.wait_for_function("() => (document.querySelector('#heatmap .gtitle')?.textContent || '')"
                           ".includes('confidence p(code) · 13 frames')")
    inspector = page.locator("#inspector")
    sync_api.expect(inspector).to_contain_text("top-5 alternatives")
    assert page.locator("#inspector .alt").count() == 16 * 5
    assert "–" not in page.locator("#inspector td.p").all_inner_texts()
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "score-recording.png"), full_page=True)

    page.locator("#surgery").get_by_text("Code surgery").click()
    page.locator("#edit-op").get_by_text("set", exact=True).click()
    for elem_id, value in (("edit-codebook", 3), ("edit-start", 5), ("edit-end", 5), ("edit-value", 7)):
        fill_number(page, elem_id, value)
    page.locator("#edit-apply").click()
    log = page.locator("#edit-log")
    sync_api.expect(log).to_contain_text("CB3 frame 5: set to 7", timeout=90_000)
    sync_api.expect(log).to_contain_text("mean log-probability per code", timeout=90_000)  # scored after the edit
    text = log.inner_text()
    assert "CB3 frame 5:" in text and "→ 7, p " in text, text
    assert "1 edited cells" in heatmap_title(page) and "confidence" in heatmap_title(page)
    log.scroll_into_view_if_needed()
    page.screenshot(path=str(SCREENSHOTS / "score-surgery.png"), full_page=True)
