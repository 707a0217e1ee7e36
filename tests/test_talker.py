"""The talker's inputs and codes: the next-step input HF's `prepare_inputs_for_generation` builds,
and speak mode's codes against HF's (the prompt itself: test_prompt.py)."""

from __future__ import annotations

import numpy as np
import torch
from transformers import DynamicCache, LogitsProcessor

from omni_core import SpeechRequest
from omni_core.models.code_predictor import predict_reprefill


def test_next_talker_input_equals_hf(hf, pipe):
    C = pipe.config.talker.hidden_size
    g = torch.Generator().manual_seed(1)
    h_last = torch.randn(1, 1, C, generator=g)  # talker's last hidden state (last layer, last position)
    cb0 = torch.tensor([[517]])
    trailing, pad = torch.randn(1, 5, C, generator=g), torch.randn(1, 1, C, generator=g)
    cache = DynamicCache(config=hf.talker.config.text_config)
    for step in (0, 4, 5, 9):  # inside the text, its last entry, and past its end (tts_pad)
        want = hf.talker.prepare_inputs_for_generation(
            cb0, cache=cache, hidden_states=((h_last,), None), generation_step=step,
            trailing_text_hidden=trailing, tts_pad_embed=pad, use_cache=True, is_first_iteration=False)
        codes, _, embeds = predict_reprefill(pipe.talker.code_predictor, h_last[:, 0],
                                             pipe.talker.model.codec_embedding(cb0[:, 0]))
        text_step = trailing[:, step:step + 1] if step < trailing.shape[1] else pad
        got = pipe.talker.embed_codes(cb0[:, 0], embeds) + text_step
        torch.testing.assert_close(want["residual_codes"], torch.cat([cb0, codes], dim=1))
        torch.testing.assert_close(got, want["inputs_embeds"], atol=1e-5, rtol=1e-5)


class ForceTokens(LogitsProcessor):
    """Make HF's thinker write a given reply, so HF builds the talker prompt from it."""

    def __init__(self, prompt_len: int, reply: list[int]):
        self.prompt_len, self.reply = prompt_len, reply

    def __call__(self, input_ids, scores):
        forced = torch.full_like(scores, float("-inf"))
        forced[:, self.reply[input_ids.shape[1] - self.prompt_len]] = 0
        return forced


def hf_talker_inputs(hf, pipe, text: str, max_frames: int):
    """HF's talker prompt and trailing text (the talker's generate kwargs), codes [T, 16] and waveform
    when its thinker writes `text` + <|im_end|>."""
    prompt = pipe.chat_prompt(text)
    reply = pipe.tokenizer(text, add_special_tokens=False)["input_ids"] + [pipe.config.token_ids["im_end"]]
    captured, original, decode = {}, hf.talker.generate, hf.code2wav.chunked_decode

    def capture(**kw):
        captured.update(kw)
        return original(**kw)

    def capture_codes(codes, **kw):  # observe the codes HF decodes; decoding itself is HF's
        captured["codes"] = codes[0].T.numpy().copy()
        return decode(codes, **kw)

    hf.talker.generate, hf.code2wav.chunked_decode = capture, capture_codes
    try:
        _, wav = hf.generate(input_ids=torch.tensor([prompt]), speaker="ethan", thinker_do_sample=False,
                             thinker_max_new_tokens=len(reply), thinker_eos_token_id=reply[-1],
                             thinker_logits_processor=[ForceTokens(len(prompt), reply)],
                             talker_max_new_tokens=max_frames + 1, talker_do_sample=False)
    finally:
        hf.talker.generate, hf.code2wav.chunked_decode = original, decode
    return prompt, reply, captured, wav.reshape(-1).numpy()


def test_speak_mode_codes_equal_hf(hf, pipe):
    text = "Say exactly this."
    _, _, want, want_wav = hf_talker_inputs(hf, pipe, text, 10)
    result = pipe.generate(SpeechRequest(text, mode="speak", max_frames=10))
    assert result.text == text and result.text_ids == pipe.tokenizer(text, add_special_tokens=False)["input_ids"]
    assert want["codes"].shape == (10, 16)
    np.testing.assert_array_equal(result.codes, want["codes"])
    np.testing.assert_allclose(result.audio, want_wav, atol=1e-4, rtol=0)
