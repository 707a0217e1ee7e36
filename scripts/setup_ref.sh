#!/usr/bin/env bash
# Build .venv-ref: the official Qwen3-TTS package (qwen-tts 0.1.1), the oracle for our
# Qwen3-TTS parity tests (tests/reference/qwen_tts_oracle.py runs in it as a subprocess).
# It lives apart from .venv because qwen-tts pins transformers 4.57.3 and ours is 5.x.
#
# qwen-tts declares torchaudio, which the package index does not have for torch 2.13; only
# its 25 Hz codec imports it (torchaudio.compliance.kaldi) and the 12 Hz path never calls
# it, so qwen-tts goes in with --no-deps, its real needs by name, and stub torchaudio and
# sox modules inside this venv only (the real sox package needs the sox binary and prints
# a warning at every import without it; it too serves only the 25 Hz codec). torch is
# pinned to the CPU wheel on local disk: an unpinned torch would pull a multi-GB CUDA build.
# Safe to run again: a venv that imports qwen_tts is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-ref
PY=$VENV/bin/python
PIP=("$PY" -m pip install --quiet --disable-pip-version-check)

if [ -x "$PY" ] && "$PY" -c 'import qwen_tts' >/dev/null 2>&1; then
  exit 0
fi

if [ ! -x "$PY" ]; then
  python=python3.11
  command -v "$python" >/dev/null 2>&1 || python=python3
  "$python" -m venv "$VENV"
fi

"${PIP[@]}" torch==2.13.0 transformers==4.57.3 accelerate==1.12.0 \
  numpy==2.4.6 librosa==0.11.0 soundfile einops onnxruntime
"${PIP[@]}" --no-deps qwen-tts==0.1.1

# The stubs: importable, and loud if anything ever calls them.
site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir -p "$site/torchaudio/compliance"
cat > "$site/torchaudio/__init__.py" <<'EOF'
"""Stub torchaudio for .venv-ref (scripts/setup_ref.sh): qwen-tts imports it only for its
25 Hz codec, which the Qwen3-TTS 12 Hz oracle never runs."""
__version__ = "0.0.0+stub"
EOF
: > "$site/torchaudio/compliance/__init__.py"
cat > "$site/torchaudio/compliance/kaldi.py" <<'EOF'
def fbank(*args, **kwargs):
    raise NotImplementedError("torchaudio is a stub in .venv-ref (scripts/setup_ref.sh)")
EOF
cat > "$site/sox.py" <<'EOF'
"""Stub sox for .venv-ref (scripts/setup_ref.sh): only qwen-tts's 25 Hz codec uses it."""
EOF

"$PY" -c "import qwen_tts" >/dev/null 2>&1 || { echo "setup_ref.sh: qwen_tts does not import in $VENV" >&2; exit 1; }
echo "setup_ref.sh: $VENV ready"
