"""Inspecting codes in a real browser (Playwright, Debian's Chromium, the real server): generate,
click a heatmap column and see that frame's inspector with alternatives, play it, the playhead
moves while audio plays, the spectrogram's x-range equals the heatmap's, codebook statistics,
edit a codebook and hear the re-decode, pin A, generate B, see the diff. Screenshots of each
state under outputs/screenshots/."""

from __future__ import annotations

import pytest

from .test_browser import (ARGS, CHROMIUM, SCREENSHOTS, TIMEOUT_MS, fill_number, generate_and_wait, set_max_frames,
                           sync_api)

pytestmark = pytest.mark.skipif(not __import__("os").path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM}")


@pytest.fixture(scope="module")
def page(app_server):
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        page = browser.new_context(viewport={"width": 1400, "height": 1000}).new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.goto(app_server)
        page.locator("#generate").wait_for()
        yield page
        browser.close()


def shot(page, name: str, selector: str | None = None) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    target = page.locator(selector) if selector else page
    target.screenshot(path=str(SCREENSHOTS / f"inspect-{name}.png"), **({} if selector else {"full_page": True}))


def x_range(page, elem_id: str) -> list[float]:
    return page.evaluate(f"() => document.querySelector('#{elem_id} .js-plotly-plot')._fullLayout.xaxis.range")


def click_frame(page, frame: int, frame_s: float = 0.08) -> None:
    """Click the heatmap at the middle of `frame`'s column (and CB3's row)."""
    page.locator("#heatmap").scroll_into_view_if_needed()
    box = page.evaluate("""() => { const gd = document.querySelector('#heatmap .js-plotly-plot');
        const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis, r = gd.getBoundingClientRect();
        return {left: r.left + xa._offset, top: r.top + ya._offset, xa: xa.range, width: xa._length,
                height: ya._length}; }""")
    t = (frame + 0.5) * frame_s
    x = box["left"] + (t - box["xa"][0]) / (box["xa"][1] - box["xa"][0]) * box["width"]
    y = box["top"] + box["height"] * 3.5 / 16
    page.mouse.move(x, y)  # plotly reports a click on the point it is hovering: hover first, as a person does
    page.wait_for_timeout(300)
    page.mouse.click(x, y)


def play(page, elem_id: str, tries: int = 6) -> None:
    """Press the player's Play button until the player says it is playing (its Pause button shows).
    Once, while the other test worker compiled, one press did not start the player within 90 s (most
    likely the press came while the player was still taking in the new clip): press again, as a person
    would."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    pause = page.locator(f"#{elem_id} button[aria-label=Pause]")
    for _ in range(tries - 1):
        page.locator(f"#{elem_id} button[aria-label=Play]").click()
        try:
            pause.wait_for(timeout=15_000)
            return
        except PlaywrightTimeout:
            continue
    page.locator(f"#{elem_id} button[aria-label=Play]").click()
    pause.wait_for()


def test_generate_inspect_a_frame_and_play_it(page):
    page.locator("#text textarea").fill("Inspect these codes.")
    set_max_frames(page, 40)
    generate_and_wait(page, "KV cache")  # a CPU's default predictor
    page.wait_for_function("() => document.querySelector('#inspector')?.innerText.includes('frame 0')")
    # Codebook statistics beside the heatmap, the spectrogram under it on the same time axis.
    page.locator("#cbstats .js-plotly-plot").wait_for()
    assert "40 frames" in page.locator("#cbstats").inner_text()
    page.locator("#spectrogram .js-plotly-plot").wait_for()
    assert x_range(page, "spectrogram") == x_range(page, "heatmap")

    click_frame(page, 17)
    page.wait_for_function("() => document.querySelector('#inspector')?.innerText.includes('frame 17')")
    text = page.locator("#inspector").inner_text()
    assert "1.36–1.44 s" in text and "top-5 alternatives" in text and "CB15" in text
    assert page.locator("#inspector .alt").count() == 16 * 5
    play(page, "frame-audio")
    shot(page, "frame")


def test_playhead_moves_while_audio_plays(page):
    page.evaluate("""() => { const a = [...document.querySelectorAll('#audio audio')].find(a => a.src);
                             a.currentTime = 0; a.play(); }""")
    page.wait_for_function("() => Number(document.querySelector('#heatmap .lab-playhead')?.dataset.t) > 0.2")
    first = page.evaluate("() => document.querySelector('#heatmap .lab-playhead').getBoundingClientRect().left")
    page.wait_for_function("""(x) => document.querySelector('#heatmap .lab-playhead').getBoundingClientRect().left
                                     > x + 5""", arg=first)
    shot(page, "playhead")
    # Paused, both playheads settle on one time; read together (while playing they move between two reads)
    page.evaluate("() => document.querySelectorAll('audio').forEach(a => a.pause())")
    page.wait_for_timeout(300)
    heat, spec = page.evaluate("""() => ['#heatmap', '#spectrogram'].map(
        id => document.querySelector(id + ' .lab-playhead').getBoundingClientRect().left)""")
    assert abs(heat - spec) < 12  # the same time sits at the same x in both


def test_edit_a_codebook_and_hear_the_redecode(page):
    page.locator("#surgery").get_by_text("Code surgery").click()
    for elem_id, value in (("edit-codebook", 2), ("edit-start", 5), ("edit-end", 20)):
        fill_number(page, elem_id, value)
    page.locator("#edit-apply").click()
    sync_api.expect(page.locator("#edit-log")).to_contain_text("CB2 frames 5..20", timeout=TIMEOUT_MS)  # says what it saw if not
    page.wait_for_function("() => document.querySelector('#heatmap .gtitle')?.textContent.includes('16 edited cells')")
    # The inspected frame (17, inside the edit) is redrawn with CB2 marked as dropped.
    page.wait_for_function("() => document.querySelector('#inspector')?.innerText.includes('dropped')")
    assert "frame 17" in page.locator("#inspector").inner_text()
    # On a phone the inspector (its notes and alternatives) wraps inside the screen's width.
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        page.wait_for_timeout(500)
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        page.locator("#inspector").screenshot(path=str(SCREENSHOTS / "inspect-phone-inspector.png"))
        assert overflow <= 1, f"the page is {overflow}px wider than a 390px phone screen"
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})
    play(page, "audio-edit")
    shot(page, "surgery")
    fill_number(page, "edit-codebook", 16)
    page.locator("#edit-apply").click()
    page.get_by_text("codebook 16 is outside 0..15").first.wait_for()
    page.locator("#edit-restore").click()
    page.wait_for_function("() => !document.querySelector('#heatmap .gtitle')?.textContent.includes('edited')")
    page.wait_for_function("() => !document.querySelector('#inspector')?.innerText.includes('dropped')")


def test_pin_a_generate_b_and_see_the_diff(page):
    page.locator("#pin").click()
    page.wait_for_function("() => document.querySelector('#ab-summary')?.innerText.includes('pinned')")
    page.locator("#predictor").get_by_text("re-prefill", exact=True).click()
    page.locator("#do-sample input, #sampling").first.click()
    page.locator("#do-sample input").check()
    generate_and_wait(page, "re-prefill")
    page.wait_for_function("() => document.querySelector('#ab-summary')?.innerText.includes('agree')")
    title = page.locator("#ab-diff .gtitle").text_content()
    assert "codes differ" in title and "40 common frames" in title
    assert "%" in page.locator("#ab-diff").inner_text()  # per-codebook agreement on the rows
    shot(page, "ab")
    page.locator("#ab").scroll_into_view_if_needed()
    shot(page, "page")
