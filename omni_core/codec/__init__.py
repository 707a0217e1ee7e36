"""Codes → audio.

code2wav.py   Code2Wav: 16 codes per frame → 1920 samples at 24 kHz (Qwen3-Omni's codec)
state.py      CodecState: the carried state of its causal layers
streaming.py  StreamingDecoder: incremental decode, equal to the whole decode
"""
