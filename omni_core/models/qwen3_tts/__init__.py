"""Qwen3-TTS's speech path: text → dense talker → shared code predictor → the 12 Hz codec.

config.py           config.json (+ speech_tokenizer/, generation_config.json) into dataclasses
talker.py           the dense talker with its text embedding and text_projection
prompt.py           the talker's prompt and text steps, as the package builds them
voices.py           speakers, languages, dialects; what a model can be asked
speaker_encoder.py  the Base models' x-vector (log-mel → ECAPA-TDNN)

The codec is omni_core/codec/qwen3_tts.py; docs/QWEN3_TTS.md has the facts read in the
official package, which the parity tests (tests/test_qwen3_tts*.py) run as the oracle.
"""
