"""Random-weight checkpoints made locally: the tiny presets and the real-width configs.

tiny.py     'tiny', 'tiny-b': HF classes + save_pretrained, cached on disk
presets.py  the published Qwen3-Omni widths (real-width tests, 'random:' sources)
qwen3_tts.py  'tiny-tts' (own modules, cached on disk) and the Qwen3-TTS widths ('random:qwen3-tts-*')
"""
