#!/usr/bin/env bash
# Set up Omni Speech Lab on a Debian machine with Python 3.11: ffmpeg (streams audio to the
# browser), a .venv with the pinned packages, and with --dev also Chromium and the test tools.
# Safe to run again: whatever is already there is kept.
set -euo pipefail
cd "$(dirname "$0")/.."

dev=0
for arg in "$@"; do
  case "$arg" in
    --dev) dev=1 ;;
    -h|--help) echo "usage: scripts/setup.sh [--dev]"; exit 0 ;;
    *) echo "setup.sh: unknown option $arg (usage: scripts/setup.sh [--dev])" >&2; exit 2 ;;
  esac
done

# System packages, only when a binary is missing.
missing=()
command -v ffmpeg >/dev/null 2>&1 || missing+=(ffmpeg)
if [ "$dev" = 1 ]; then
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]} with apt-get"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}"
fi

# Python environment.
if [ ! -x .venv/bin/python ]; then
  python=python3.11
  command -v "$python" >/dev/null 2>&1 || python=python3
  "$python" -m venv .venv
fi
.venv/bin/python -c 'import sys; sys.version_info[:2] == (3, 11) or print(f"setup.sh: warning: .venv has Python {sys.version.split()[0]}; the pins are tested on 3.11")'
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
if [ "$dev" = 1 ]; then
  .venv/bin/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
fi
echo "setup.sh: ready (.venv/bin/python app.py starts the app)"
