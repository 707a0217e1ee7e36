"""Codes → audio.

code2wav.py   Code2Wav: 16 codes per frame → 1920 samples at 24 kHz (Qwen3-Omni's codec)
backend.py    the convolutional back end both codecs share: upsampling, the decoder; a batch of streams row by
              row or batched
batching.py   whether a codec runs a batch of streams batched on this machine (checked at load)
packed.py     the largest convolutions' weights packed for oneDNN
state.py      CodecState: the carried state of its causal layers
streaming.py  StreamingDecoder: incremental decode, equal to the whole decode
qwen3_tts.py  TTSCodec: Qwen3-TTS's 12 Hz codec (split RVQ front end on Code2Wav's back end; Mimi encoder)
"""
