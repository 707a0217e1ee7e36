"""A tiny checkpoint whose talker ends its utterances: codec EOS wins CB0 at a frame the text chooses.

Random weights never emit codec EOS. Here one talker dimension `K` is made a clean
channel from the text to the EOS logit, so the stop is exact and easy to place:

- text_projection: its unit `U` reads thinker-embedding dimension `M` and writes only
  dimension K. Every token's embedding has -1 in M, except the triggers (the byte `~`
  and <tts_text_eod>), which have +1: K gets silu(+30)·10 = 300 for a trigger, ~0 otherwise.
- nothing else writes K: the talker's and the code predictor's codec embeddings, every
  talker layer's o_proj and expert / shared-expert down_proj have zero in K, so at the
  last layer K still holds exactly what the text step put there.
- codec_head: the EOS row reads only K, and no other row reads K.

The talker reads text step k-1 when it chooses frame k's CB0 (the prompt ends with the
first text token), so in speak mode an utterance of n text tokens ends after n frames
(<tts_text_eod> is read at frame n), or after i frames if token i (i ≥ 0) is `~`:
"~..." gives zero frames, "a~" one, "abc" three.
"""

from __future__ import annotations

from pathlib import Path

import torch

from omni_core.synthetic.tiny import TOKEN_IDS, build_hf_model, build_tokenizer

K, M, U = 0, 0, 0  # talker dimension, thinker embedding dimension, text_projection unit
TRIGGER = "~"
EOS_ID = 2150


@torch.no_grad()
def build_eos_model(preset: str = "tiny"):
    """The HF model of `preset` with the EOS channel wired in (float32, eval)."""
    model = build_hf_model(preset)
    eos = model.config.talker_config.codec_eos_token_id
    assert eos == EOS_ID
    talker = model.talker
    C = talker.config.text_config.hidden_size

    embed = model.thinker.get_input_embeddings().weight  # [V_text, D]
    embed[:, M] = -1.0
    embed[[ord(TRIGGER), TOKEN_IDS["<tts_text_eod>"]], M] = 1.0
    fc1, fc2 = talker.text_projection.linear_fc1, talker.text_projection.linear_fc2
    fc1.weight[U] = 0.0
    fc1.weight[U, M], fc1.bias[U] = 30.0, 0.0
    fc2.weight[:, U] = 0.0
    fc2.weight[K] = 0.0
    fc2.weight[K, U], fc2.bias[K] = 10.0, 0.0

    talker.model.codec_embedding.weight[:, K] = 0.0
    for table in talker.code_predictor.model.codec_embedding:
        table.weight[:, K] = 0.0
    for layer in talker.model.layers:
        layer.self_attn.o_proj.weight[K] = 0.0
        layer.mlp.shared_expert.down_proj.weight[K] = 0.0
        down = layer.mlp.experts.down_proj  # [E, C, I]
        assert down.shape[1] == C != down.shape[2]
        down[:, K] = 0.0

    head = talker.codec_head.weight  # [V_codec, C]
    head[:, K] = 0.0
    head[eos] = 0.0
    head[eos, K] = 1.0
    return model


def ensure_eos_model(root: Path, preset: str = "tiny") -> Path:
    """Write the checkpoint (weights + tokenizer) under root once; return its directory."""
    target = root / f"{preset}-eos"
    if not (target / "config.json").exists():
        build_eos_model(preset).save_pretrained(target, max_shard_size="2MB")
        build_tokenizer().save_pretrained(target)
    return target
