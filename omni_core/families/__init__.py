"""One adapter per model family, chosen once at load: outside this package no code asks which family runs.

protocol.py    Family: what the load recipe, the pipeline and the engine ask of a family
qwen3_omni.py  Qwen3Omni: the thinker writes (chat) or is skipped (speak), the talker reads its tokens
qwen3_tts.py   Qwen3TTS: the text straight to the talker; named voices, instructions, clones
registry.py    which family a source is (config.json's model_type, a 'random:' preset's name)
"""
