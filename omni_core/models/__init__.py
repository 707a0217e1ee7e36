"""The models: shared blocks and one package per family.

config.py          the checkpoint's config, read into dataclasses (CheckpointError)
layers.py          attention, MLP, norms, RoPE, KV caches
moe.py             the router, the stacked experts, the sparse MoE block (+ shared expert)
decoder.py         a decoder layer and the stack: prefill, one token for each of several requests
invariant.py       the batch-invariant linear: per weight shape, the cheapest plan that keeps rows exact
sampling.py        greedy / sampled choice, HF's logits processing, top-k alternatives
code_predictor.py  CB1..CB15 within a frame (re-prefill and KV), shared by every family
qwen3_omni/        thinker, MoE talker, the talker's prompt
qwen3_tts/         dense talker with its text projection, prompt, voices, speaker encoder
"""
