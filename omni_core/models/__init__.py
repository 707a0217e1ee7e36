"""The models: shared blocks and one package per family.

config.py          the checkpoint's config, read into dataclasses (CheckpointError)
layers.py          attention, MLP / MoE, norms, RoPE, KV caches, the batch-invariant linear
sampling.py        greedy / sampled choice, HF's logits processing, top-k alternatives
code_predictor.py  CB1..CB15 within a frame (re-prefill and KV), shared by every family
qwen3_omni/        thinker, MoE talker, the talker's prompt
qwen3_tts/         dense talker with its text projection, prompt, voices, speaker encoder
"""
