"""The Qwen3-TTS oracle: the official `qwen-tts` package (0.1.1) on small random checkpoints.

Runs in .venv-ref (scripts/setup_ref.sh) as a subprocess of the parity tests, and never
imports omni_core: it is the reference, built and run with the official classes only.

    build ROOT                      write custom_voice/, voice_design/, base/ under ROOT
    run MODEL REQUESTS.json OUT.npz greedy generation through the package's wrapper
    encode MODEL IN.npz OUT.npz     the codec's encoder alone (IN: audio, sample_rate; --dtype)
    decode MODEL IN.npz OUT.npz     the codec's decoder alone (IN: codes [T, 16])
    xvector MODEL IN.npz OUT.npz    the Base model's speaker embedding of a 24 kHz clip

Checkpoints are in the hub layout (config.json with model_type qwen3_tts,
generation_config.json, model.safetensors, Qwen2 tokenizer files, speech_tokenizer/)
with seeded random weights: every parameter and persistent buffer is overwritten from
a seeded generator (`fill_*`), so nothing is left as the constructors' zeros or as
uninitialised memory, and the scales keep activations O(1) so that greedy codes vary.

The text tokenizer is byte-level BPE with Qwen's special tokens at Qwen's ids, and a base
vocabulary of 151643 entries (filled with tokens BPE never produces) as Qwen's has: the
package loads it with `fix_mistral_regex=True`, which under transformers 4.57.3 swaps the
pre-tokenizer's split for Mistral's only when the base vocabulary exceeds 100000 entries,
so a small vocabulary would hide that behaviour. A few merges cross a lower-to-upper case
boundary ("HelloWorld") so that the two splits give different ids.

A request (one JSON object of the list): text, speaker, language, instruct, text_input
("whole" | "streaming" | null: the wrapper's default), ref_audio ([samples]) with
ref_sample_rate and ref_text (Base: ICL clone; without ref_text an x-vector-only clone),
max_frames. Our max_frames=N is the package's max_new_tokens=N+1 (see docs/QWEN3_TTS.md).
OUT.npz holds, for request i: codes_i [T, 16] int64, audio_i float32, embeds_i (the
talker's prefill input) and trailing_i (its trailing text), and sample_rate.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np
import torch

SEED = 20260115
BASE_VOCAB = 151643  # Qwen's byte-level BPE vocabulary; its special tokens follow
TEXT_VOCAB = 151936  # rows of the talker's text embedding (real value)

# Qwen's special tokens in id order from 151643 (gaps filled, so every id is Qwen's).
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
    "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
    "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
    "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
    "<tool_response>", "</tool_response>", "<think>", "</think>", "<|audio_start|>", "<|audio_end|>",
    "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>", "<tts_text_bos_single>", "<|audio_pad|>",
]
TOKEN_IDS = {tok: BASE_VOCAB + i for i, tok in enumerate(SPECIAL_TOKENS)}

# Words that become single tokens (merge chains). "HelloWorld" crosses a case boundary:
# Qwen2's split keeps it whole, Mistral's splits it into "Hello" + "World".
WORDS = ["assistant", "user", "system", "Hello", "HelloWorld", " the", " speech", " codes",
         " voice", " world", "Good", " morning", " is", " a", " test", "ing"]

# Codec-vocabulary ids, all in the band [vocab - 1024, vocab) that generation suppresses.
CODEC_IDS = dict(codec_pad_id=2148, codec_bos_id=2149, codec_eos_token_id=2150, codec_think_id=2154,
                 codec_nothink_id=2155, codec_think_bos_id=2156, codec_think_eos_id=2157)
LANGUAGES = {"chinese": 2055, "english": 2050, "german": 2053, "japanese": 2058, "beijing_dialect": 2074}

KINDS = {
    # Named speakers (one a dialect speaker), an instruction allowed (a 1.7B-style model).
    "custom_voice": dict(
        size="1b7", talker=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=16, mrope_section=[2, 3, 3]),
        predictor=dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16),
        speakers={"vivian": 3000, "ryan": 3001, "dylan": 3002}, dialects={"dylan": "beijing_dialect"},
        codec=dict(sliding_window=6), encoder=dict(sliding_window=16),  # the encoder's: 8 frames
        generation=dict(repetition_penalty=1.05)),
    # No speakers; the talker is wider than the predictor (small_to_mtp_projection).
    "voice_design": dict(
        size="1b7", talker=dict(hidden_size=96, intermediate_size=160, num_hidden_layers=3,
                                num_attention_heads=6, num_key_value_heads=2, head_dim=16, mrope_section=[2, 3, 3]),
        predictor=dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=1, head_dim=12),
        speakers={}, dialects={}, codec=dict(sliding_window=72), generation=dict(repetition_penalty=1.1)),
    # Voice clone: a speaker encoder (ECAPA-TDNN) fills the speaker slot.
    "base": dict(
        size="0b6", talker=dict(hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                                num_attention_heads=4, num_key_value_heads=2, head_dim=12, mrope_section=[2, 2, 2]),
        predictor=dict(hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                       num_key_value_heads=1, head_dim=24),
        speakers={}, dialects={}, codec=dict(sliding_window=6), encoder=dict(sliding_window=32),  # 16 frames
        generation=dict(repetition_penalty=1.05),
        speaker_encoder=dict(mel_dim=128, enc_channels=[32, 32, 32, 32, 96], enc_kernel_sizes=[5, 3, 3, 3, 1],
                             enc_dilations=[1, 2, 3, 4, 1], enc_attention_channels=16, enc_res2net_scale=4,
                             enc_se_channels=16, sample_rate=24000)),
}


# --- the text tokenizer -----------------------------------------------------------------

def byte_alphabet() -> dict[int, str]:
    from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
    return bytes_to_unicode()


def build_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """256 byte characters, one merge chain per word in WORDS, then unreachable fillers."""
    to_char = byte_alphabet()
    vocab = {to_char[b]: i for i, b in enumerate(sorted(to_char))}
    merges: list[tuple[str, str]] = []
    for word in WORDS:
        chars = "".join(to_char[b] for b in word.encode())
        piece = chars[0]
        for ch in chars[1:]:
            if piece + ch not in vocab:
                merges.append((piece, ch))
                vocab[piece + ch] = len(vocab)
            piece += ch
    filler = 0
    while len(vocab) < BASE_VOCAB:
        vocab[f"<unused{filler}>"] = len(vocab)  # no merge makes these
        filler += 1
    return vocab, merges


def build_tokenizer(folder: Path) -> None:
    from transformers import Qwen2TokenizerFast

    vocab, merges = build_vocab()
    scratch = folder / "_scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    (scratch / "merges.txt").write_text("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    tok = Qwen2TokenizerFast(vocab_file=str(scratch / "vocab.json"), merges_file=str(scratch / "merges.txt"),
                             errors="replace", unk_token=None, bos_token=None, eos_token=None, pad_token=None,
                             model_max_length=32768)
    tok.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})  # in id order, from BASE_VOCAB
    tok.eos_token, tok.pad_token = "<|im_end|>", "<|endoftext|>"
    for name, want in TOKEN_IDS.items():
        assert tok.convert_tokens_to_ids(name) == want, (name, tok.convert_tokens_to_ids(name), want)
    for word in WORDS:
        assert len(tok(word)["input_ids"]) == 1, (word, tok(word)["input_ids"])
    tok.save_pretrained(str(folder))
    for name in ("vocab.json", "merges.txt"):
        (scratch / name).unlink()
    scratch.rmdir()


# --- configs ----------------------------------------------------------------------------

def model_config(kind: str) -> dict:
    spec = KINDS[kind]
    tk, cp = dict(spec["talker"]), dict(spec["predictor"])
    mrope = tk.pop("mrope_section")
    speakers = spec["speakers"]
    talker = dict(
        tk, vocab_size=3072, text_vocab_size=TEXT_VOCAB, text_hidden_size=32, num_code_groups=16,
        hidden_act="silu", rms_norm_eps=1e-6, rope_theta=1_000_000.0, max_position_embeddings=32768,
        rope_scaling={"rope_type": "default", "mrope_section": mrope, "interleaved": True},
        spk_id=dict(speakers), spk_is_dialect={s: spec["dialects"].get(s, False) for s in speakers},
        codec_language_id=dict(LANGUAGES), **CODEC_IDS,
        code_predictor_config=dict(cp, vocab_size=2048, num_code_groups=16, rope_theta=1_000_000.0,
                                   rms_norm_eps=1e-6, max_position_embeddings=65536),
    )
    config = dict(
        talker_config=talker, tokenizer_type="qwen3_tts_tokenizer_12hz", tts_model_size=spec["size"],
        tts_model_type=kind, im_start_token_id=TOKEN_IDS["<|im_start|>"], im_end_token_id=TOKEN_IDS["<|im_end|>"],
        tts_pad_token_id=TOKEN_IDS["<tts_pad>"], tts_bos_token_id=TOKEN_IDS["<tts_text_bos>"],
        tts_eos_token_id=TOKEN_IDS["<tts_text_eod>"],
    )
    if "speaker_encoder" in spec:
        config["speaker_encoder_config"] = dict(spec["speaker_encoder"], enc_dim=tk["hidden_size"])
    return config


def codec_config(kind: str) -> dict:
    decoder = dict(codebook_size=2048, codebook_dim=16, latent_dim=32, hidden_size=32, num_attention_heads=4,
                   num_key_value_heads=4, head_dim=8, intermediate_size=64, num_hidden_layers=2,
                   num_quantizers=16, upsample_rates=[8, 5, 4, 3], upsampling_ratios=[2, 2], decoder_dim=32,
                   rope_theta=10000.0, rms_norm_eps=1e-5, max_position_embeddings=8000,
                   **KINDS[kind]["codec"])
    encoder = dict(sampling_rate=24000, frame_rate=12.5, hidden_size=16, num_filters=4, num_residual_layers=1,
                   upsampling_ratios=[8, 6, 5, 4], codebook_size=2048, codebook_dim=8, num_quantizers=32,
                   vector_quantization_hidden_dimension=8, num_semantic_quantizers=1, upsample_groups=16,
                   num_hidden_layers=2, intermediate_size=32, num_attention_heads=2, num_key_value_heads=2,
                   head_dim=8, sliding_window=250, use_causal_conv=True, compress=2)
    encoder.update(KINDS[kind].get("encoder", {}))  # a short window (in encoder steps, 2 per frame)
    return dict(encoder_config=encoder, decoder_config=decoder, encoder_valid_num_quantizers=16,
                input_sample_rate=24000, output_sample_rate=24000, decode_upsample_rate=1920,
                encode_downsample_rate=1920)


def generation_config(kind: str) -> dict:
    defaults = dict(do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05,
                    subtalker_dosample=True, subtalker_top_k=50, subtalker_top_p=1.0, subtalker_temperature=0.9,
                    max_new_tokens=8192)
    return {**defaults, **KINDS[kind]["generation"]}


# --- seeded weights ---------------------------------------------------------------------

def fill_talker(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Matrices ~ N(0, 1/fan_in), norm weights near 1, biases small: logits spread, codes vary."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * p[0].numel() ** -0.5)
            elif name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def fill_codec(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Unit-gain convolutions (residual branches and the output conv scaled down, the output conv
    DC-free), snake and layer scales small, codebooks of unit spread with positive usage counts."""
    rand = lambda shape, std, mean=0.0: torch.randn(shape, generator=gen) * std + mean  # noqa: E731
    final = f"decoder.decoder.{len(model.decoder.decoder) - 1}."
    with torch.no_grad():
        for name, p in list(model.named_parameters()) + list(model.named_buffers()):
            leaf = name.rsplit(".", 1)[-1]
            owner = model.get_submodule(name.rsplit(".", 1)[0])
            if leaf in ("embedding_sum", "embed_sum"):
                p.copy_(rand(p.shape, 1.0))
            elif leaf == "cluster_usage":
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif leaf == "initialized":
                p.fill_(1.0)
            elif leaf in ("stride", "kernel_size", "padding_total", "inv_freq"):
                continue  # derived, not stored
            elif p.dim() >= 2:
                fan_in = p.shape[0] * p.shape[2] // max(owner.stride[0], 1) if isinstance(
                    owner, torch.nn.ConvTranspose1d) else p[0].numel()
                gain = 0.1 if name.startswith(final) else 0.3 if ".conv2." in name else 1.0
                p.copy_(rand(p.shape, gain * fan_in ** -0.5))
            elif leaf in ("alpha", "beta"):
                p.copy_(rand(p.shape, 0.3))
            elif leaf in ("scale", "gamma"):
                p.copy_(rand(p.shape, 0.2))
            elif leaf == "weight":  # norms
                p.copy_(rand(p.shape, 0.1, 1.0))
            else:  # biases
                p.copy_(rand(p.shape, 0.1))
        out = model.decoder.decoder[-1].conv
        out.weight.sub_(out.weight.mean(dim=(1, 2), keepdim=True))
        out.bias.zero_()


# --- build ------------------------------------------------------------------------------

def build(root: Path, kinds: list[str]) -> None:
    for kind in kinds:
        folder = root / kind
        if (folder / "config.json").exists():
            continue
        # Two test workers may build at once: each writes its own folder, the first rename wins.
        tmp = root / f".{kind}.{os.getpid()}.partial"
        shutil.rmtree(tmp, ignore_errors=True)
        write_checkpoint(kind, tmp)
        try:
            tmp.rename(folder)
        except OSError:
            if not (folder / "config.json").exists():
                raise
            shutil.rmtree(tmp, ignore_errors=True)  # the other worker's copy is in place (the same bytes)


def write_checkpoint(kind: str, folder: Path) -> None:
    from qwen_tts.core.models import Qwen3TTSConfig, Qwen3TTSForConditionalGeneration
    from qwen_tts.core import Qwen3TTSTokenizerV2Config, Qwen3TTSTokenizerV2Model
    from transformers import EncodecFeatureExtractor

    seed = SEED + sorted(KINDS).index(kind)
    torch.manual_seed(seed)
    model = Qwen3TTSForConditionalGeneration(Qwen3TTSConfig(**model_config(kind))).eval()
    fill_talker(model, torch.Generator().manual_seed(seed))
    model.save_pretrained(str(folder))
    write_json(folder / "config.json", hub_config(model_config(kind)))
    write_json(folder / "generation_config.json", generation_config(kind))
    build_tokenizer(folder)

    codec_dir = folder / "speech_tokenizer"
    codec = Qwen3TTSTokenizerV2Model(Qwen3TTSTokenizerV2Config(**codec_config(kind))).eval()
    fill_codec(codec, torch.Generator().manual_seed(seed + 100))
    codec.save_pretrained(str(codec_dir))
    EncodecFeatureExtractor(feature_size=1, sampling_rate=24000, padding_value=0.0).save_pretrained(str(codec_dir))
    check_round_trip(folder, model, codec)


def hub_config(config: dict) -> dict:
    """config.json as released: the declared fields only. save_pretrained would also write the
    speaker encoder config's inherited fields, which its __init__ (no **kwargs) then refuses."""
    import transformers
    return dict(config, model_type="qwen3_tts", architectures=["Qwen3TTSForConditionalGeneration"],
                dtype="float32", transformers_version=transformers.__version__)


def write_json(path: Path, obj: dict) -> None:
    path.write_text(json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


def check_round_trip(folder: Path, model, codec) -> None:
    """What the package loads is exactly what was written (no key missing, nothing re-initialised)."""
    tts = load(folder)
    for mine, loaded in ((model, tts.model), (codec, tts.model.speech_tokenizer.model)):
        want, got = mine.state_dict(), loaded.state_dict()
        assert set(want) == set(got), sorted(set(want) ^ set(got))
        bad = [k for k in want if not torch.equal(want[k], got[k].to(want[k].dtype))]
        assert not bad, f"changed on loading: {bad[:5]}"


# --- run --------------------------------------------------------------------------------

def load(folder: Path, dtype: str = "float32"):
    from qwen_tts import Qwen3TTSModel
    return Qwen3TTSModel.from_pretrained(str(folder), dtype=getattr(torch, dtype))


def run(folder: Path, requests: list[dict], dtype: str = "float32") -> dict[str, np.ndarray]:
    tts = load(folder, dtype)
    captured: dict[str, object] = {}
    spy(tts.model, "generate", captured, "codes")
    spy(tts.model.talker, "generate", captured, "talker")
    out: dict[str, np.ndarray] = {}
    for i, req in enumerate(requests):
        captured.clear()
        wavs, sr = generate(tts, req)
        out[f"codes_{i}"] = captured["codes"][0][0].cpu().numpy().astype(np.int64)
        out[f"audio_{i}"] = np.asarray(wavs[0], dtype=np.float32)
        kwargs = captured["talker_kwargs"]
        out[f"embeds_{i}"] = kwargs["inputs_embeds"][0].float().cpu().numpy()
        out[f"trailing_{i}"] = kwargs["trailing_text_hidden"][0].float().cpu().numpy()
        out["sample_rate"] = np.array(sr)
    return out


def spy(obj, method: str, captured: dict, key: str) -> None:
    """Record what obj.method returned (and its keyword arguments) on each call."""
    original = getattr(obj, method)

    def wrapper(*args, **kwargs):
        result = original(*args, **kwargs)
        captured[key], captured[f"{key}_kwargs"] = result, kwargs
        return result

    setattr(obj, method, wrapper)


def generate(tts, req: dict):
    greedy = dict(do_sample=False, subtalker_dosample=False, max_new_tokens=req["max_frames"] + 1)
    mode = req.get("text_input")
    if mode is not None:
        greedy["non_streaming_mode"] = mode == "whole"
    kind = tts.model.tts_model_type
    if kind == "custom_voice":
        return tts.generate_custom_voice(text=req["text"], speaker=req["speaker"], language=req.get("language"),
                                         instruct=req.get("instruct"), **greedy)
    if kind == "voice_design":
        return tts.generate_voice_design(text=req["text"], instruct=req.get("instruct") or "",
                                         language=req.get("language"), **greedy)
    ref = (np.asarray(req["ref_audio"], dtype=np.float32), int(req["ref_sample_rate"]))
    return tts.generate_voice_clone(text=req["text"], language=req.get("language"), ref_audio=ref,
                                    ref_text=req.get("ref_text"), x_vector_only_mode=not req.get("ref_text"),
                                    **greedy)


def encode(folder: Path, audio: np.ndarray, sample_rate: int, dtype: str = "float32") -> dict[str, np.ndarray]:
    tok = codec_tokenizer(folder, dtype)
    codes = tok.encode(audio.astype(np.float32), sr=sample_rate).audio_codes[0]
    return {"codes": codes.cpu().numpy().astype(np.int64)}


def decode(folder: Path, codes: np.ndarray) -> dict[str, np.ndarray]:
    tok = codec_tokenizer(folder)
    wavs, sr = tok.decode({"audio_codes": torch.from_numpy(codes.astype(np.int64))})
    return {"audio": np.asarray(wavs[0], dtype=np.float32), "sample_rate": np.array(sr)}


def xvector(folder: Path, audio: np.ndarray) -> dict[str, np.ndarray]:
    tts = load(folder)
    return {"xvector": tts.model.extract_speaker_embedding(audio.astype(np.float32), 24000).float().numpy()}


def codec_tokenizer(folder: Path, dtype: str = "float32"):
    from qwen_tts import Qwen3TTSTokenizer
    return Qwen3TTSTokenizer.from_pretrained(str(folder / "speech_tokenizer"), dtype=getattr(torch, dtype))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("root", type=Path)
    b.add_argument("--kinds", nargs="*", default=sorted(KINDS))
    r = sub.add_parser("run")
    r.add_argument("model", type=Path)
    r.add_argument("requests", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--dtype", default="float32")
    for name in ("encode", "decode", "xvector"):
        p = sub.add_parser(name)
        p.add_argument("model", type=Path)
        p.add_argument("inputs", type=Path)
        p.add_argument("out", type=Path)
        if name == "encode":
            p.add_argument("--dtype", default="float32")
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)

    if args.command == "build":
        args.root.mkdir(parents=True, exist_ok=True)
        build(args.root, args.kinds)
        return
    if args.command == "run":
        result = run(args.model, json.loads(args.requests.read_text()), args.dtype)
    else:
        inputs = np.load(args.inputs)
        if args.command == "encode":
            result = encode(args.model, inputs["audio"], int(inputs["sample_rate"]), args.dtype)
        elif args.command == "decode":
            result = decode(args.model, inputs["codes"])
        else:
            result = xvector(args.model, inputs["audio"])
    np.savez(args.out, **result)


if __name__ == "__main__":
    sys.exit(main())
