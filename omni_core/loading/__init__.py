"""One load recipe for every source: config, tokenizer and weights from a source, then modules.

recipe.py          load_model: directory, hub id, tiny preset or random: source → LoadedModel
checkpoint.py      config.json, tokenizer, safetensors shards → modules
qwen3_omni.py      the Qwen3-Omni family's part: its config, tokenizer, modules (thinker, talker, Code2Wav)
qwen3_tts.py       the Qwen3-TTS family's part: its modules, speech_tokenizer/, the pre-tokenizer rule
hub.py             hub ids → the local hub cache (snapshot_download)
memory.py          what the weights need and what the device has, checked before loading
random_weights.py  'random:…' sources: real sizes, seeded random weights, no files
quiet.py           transformers' warnings and progress bars kept off the console
"""
