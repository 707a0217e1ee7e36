#!/usr/bin/env bash
# Refresh docs/screenshot.png, the README's picture of the page. The browser test that drives
# the page (generate, switch to KV, re-decode) saves outputs/screenshots/desktop.png (git-ignored);
# this runs that one test and copies its screenshot over. Needs Chromium (CHROMIUM=/path).
set -euo pipefail
cd "$(dirname "$0")/.."
shot=outputs/screenshots/desktop.png
rm -f "$shot"
.venv/bin/python -m pytest -q tests/test_browser.py -k test_generate_play_switch_predictor_and_screenshot
if [[ ! -f "$shot" ]]; then
    echo "no screenshot was taken (was the browser test skipped? see above)" >&2
    exit 1
fi
cp "$shot" docs/screenshot.png
echo "docs/screenshot.png refreshed from $shot"
