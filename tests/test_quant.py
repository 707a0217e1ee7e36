"""int8 weights (omni_core/models/quant.py, load_pipeline(quantize="int8"))."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import soundfile as sf
import torch
import torch.nn.functional as F

from omni_core import SpeechRequest, load_pipeline
from omni_core.models.invariant import Linear, prompt_pieces
from omni_core.models.quant import GROUP, PIECE_GEMM_ROWS, QUANTIZED, Int4Linear, Int8Linear, quantize_weight

ROOT = Path(__file__).resolve().parent.parent


def test_quantized_weight_is_within_half_a_step_of_the_weight():
    w = torch.randn(96, 64, generator=torch.Generator().manual_seed(0))
    w[3] = 0  # an all-zero row keeps a usable scale
    q, scale = quantize_weight(w)
    assert q.dtype == torch.int8 and q.abs().max() <= 127 and scale.shape == (96,)
    step = scale.float()[:, None]
    assert torch.all((q.float() * step - w).abs() <= step / 2 * (1 + 1e-6))
    assert torch.all(q[3] == 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_linear_equals_a_float_product_with_its_dequantized_weight(dtype):
    """The kernel against F.linear in float32 on the same dequantized weight and bfloat16-rounded rows: they
    differ by the kernel's bfloat16 output rounding (and its summation order) only."""
    gen = torch.Generator().manual_seed(1)
    linear = Linear(256, 384, bias=True)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(384, 256, generator=gen) / 16)
        linear.bias.copy_(torch.randn(384, generator=gen))
    linear = linear.to(dtype).requires_grad_(False)
    int8 = Int8Linear(linear)
    x = torch.randn(2, 5, 256, generator=gen).to(dtype)
    got = int8(x)
    assert got.shape == (2, 5, 384) and got.dtype == dtype
    want = F.linear(x.to(torch.bfloat16).float(), int8.dequantized()) + linear.bias.float()
    scale = want.abs().amax()
    torch.testing.assert_close(got.float(), want, atol=float(scale) * 2 ** -7, rtol=2 ** -7)
    assert not torch.equal(int8.dequantized(), linear.weight.float())  # it really is quantized


def test_int4_linear_equals_a_float_product_with_its_group_wise_weight():
    """Int4Linear: each group of GROUP weights within 16 levels of its range, and the kernel's product equal to a
    float32 product with that dequantized weight (up to the kernel's bfloat16 output rounding)."""
    gen = torch.Generator().manual_seed(3)
    linear = Linear(256, 384, bias=True).requires_grad_(False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(384, 256, generator=gen) / 16)
    int4 = Int4Linear(linear.to(torch.bfloat16))
    w, dq = linear.weight.float().view(384, -1, GROUP), int4.dequantized().view(384, -1, GROUP)
    step = (w.amax(-1) - w.amin(-1)) / 15  # [N, K / GROUP]
    assert torch.all((dq - w).abs() <= step[..., None] * 0.51 + 1e-2 * step[..., None])
    x = torch.randn(3, 256, generator=gen).to(torch.bfloat16)
    want = F.linear(x.float(), int4.dequantized()) + linear.bias.float()
    torch.testing.assert_close(int4(x).float(), want, atol=float(want.abs().amax()) * 2 ** -7, rtol=2 ** -7)


@pytest.mark.parametrize("kind", [Int8Linear, Int4Linear])
def test_a_quantized_linear_gives_a_row_the_same_bits_in_any_call(kind):
    """Batch invariance without a plan: each row of a 1..64-row call (and a 300-row one) equals its own 1-row call."""
    gen = torch.Generator().manual_seed(2)
    linear = Linear(512, 1536, bias=False)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(1536, 512, generator=gen))
    int8 = kind(linear.to(torch.bfloat16))
    x = torch.randn(310, 512, generator=gen).to(torch.bfloat16)
    with torch.no_grad():
        solo = torch.cat([int8(x[r:r + 1]) for r in range(x.shape[0])])
        for rows in [*range(2, 65), 300]:
            for offset in (0, 3, 7):
                assert torch.equal(int8(x[offset:offset + rows]), solo[offset:offset + rows]), (rows, offset)


def test_a_long_prompt_piece_is_one_gemm_of_its_own_rows_by_the_int8_values():
    """Inside `prompt_pieces`, a piece of PIECE_GEMM_ROWS rows or more is one bfloat16 GEMM of its rows by the
    int8 values, then the scales; a shorter one the kernel. Each piece's bits are its own alone, whatever the
    pieces beside it, and within bfloat16's rounding of the kernel's."""
    gen = torch.Generator().manual_seed(3)
    linear = Linear(256, 384, bias=True)
    with torch.no_grad():
        linear.weight.copy_(torch.randn(384, 256, generator=gen) / 16)
    int8 = Int8Linear(linear.to(torch.bfloat16))
    sizes = [PIECE_GEMM_ROWS + 4, 5, PIECE_GEMM_ROWS, 33]
    x = torch.randn(sum(sizes), 256, generator=gen).to(torch.bfloat16)
    gemm = F.linear(x, int8.qweight.to(torch.bfloat16)) * int8.scale + linear.bias
    with torch.no_grad():
        kernel = int8(x)  # outside the pieces: the kernel, each row as alone
        with prompt_pieces(sizes):
            packed = int8(x)
        at = 0
        for n in sizes:
            with prompt_pieces([n]):
                alone = int8(x[at:at + n])
            assert torch.equal(packed[at:at + n], alone), n
            want = gemm if n >= PIECE_GEMM_ROWS else kernel
            assert torch.equal(alone, want[at:at + n]), n
            at += n
        torch.testing.assert_close(packed, kernel, rtol=2 ** -6, atol=2 ** -6)
        assert not torch.equal(packed, kernel)  # (the GEMM's bits are not the kernel's: this test sees the GEMM)
        with prompt_pieces([3, 4]), pytest.raises(ValueError, match="pieces of"):
            int8(torch.randn(2 * PIECE_GEMM_ROWS, 256).to(torch.bfloat16))


@pytest.mark.parametrize("mode, layer", [("int8", Int8Linear), ("int4", Int4Linear), ("mixed", Int8Linear)])
def test_a_quantized_pipeline_gives_each_request_its_solo_codes(mode, layer):
    """tiny-tts with int8 (int4, mixed) weights: three requests (greedy and sampled, KV and re-prefill) taken in
    together equal their solo runs in codes and audio; the predictor's large matmuls are quantized (tiny's talker
    layers are below the size worth quantizing: where mixed puts int4 is the real-width test's check)."""
    from tests.test_engine import assert_same, collect

    requests = [SpeechRequest("Listener one hears this.", max_frames=5, predictor="kv"),
                SpeechRequest("And listener two.", max_frames=4),
                SpeechRequest("Three, sampled.", max_frames=5, do_sample=True, seed=5, predictor="kv")]
    with load_pipeline("tiny-tts", device="cpu", quantize=mode) as pipe:
        assert pipe.info["quantize"] == mode
        assert any(isinstance(m, layer) for m in pipe.talker.code_predictor.modules())
        assert not any(isinstance(m, (Int8Linear, Int4Linear)) for m in pipe.code2wav.modules())  # codec in float
        solo = [pipe.generate(r) for r in requests]
        together = [collect(s) for s in pipe.stream_together(requests)]
    for got, want in zip(together, solo):
        assert_same(got, want)


def test_the_real_width_int8_pipeline_counts_what_it_saved():
    """Qwen3-TTS 0.6B at its real widths (one talker layer), bfloat16 → int8: every large talker and predictor
    matmul is int8, the load report says how many and how many bytes went, and a request runs."""
    with load_pipeline("random:qwen3-tts-0.6b?layers=1", device="cpu", dtype="bfloat16", quantize="int8") as pipe:
        int8 = [m for m in pipe.talker.modules() if isinstance(m, Int8Linear)]
        left = [m for m in pipe.talker.modules() if isinstance(m, Linear) and m.weight.numel() >= 1 << 16]
        assert not left and len(int8) == 4 + 5 * 4 + 15 + 1 + 2  # talker layer, predictor layers, heads, codec_head, text_projection
        saved = sum(m.qweight.numel() for m in int8)  # a byte saved per bfloat16 weight, less the scales
        assert f"int8 weights: {len(int8)} matmuls" in pipe.load_report
        assert f"{(saved - 2 * sum(m.scale.numel() for m in int8)) / 1e9:.2f} GB less" in pipe.load_report
        result = pipe.generate(SpeechRequest("A short one.", max_frames=2, predictor="kv"))
        long_prompts_prefilled_together_equal_their_solo_runs(pipe)
    assert result.codes.shape == (2, 16)


def long_prompts_prefilled_together_equal_their_solo_runs(pipe):
    """Two prompts long enough for the GEMM (quant.PIECE_GEMM_ROWS), prefilled together: each its solo run."""
    from tests.test_engine import assert_same, collect

    requests = [SpeechRequest(text, max_frames=2, predictor="kv", text_input="whole") for text in
                ("A longer sentence, read whole in the prompt, for its prefill.", "And a second one, shorter.")]
    solo = [pipe.generate(r) for r in requests]
    for got, want in zip([collect(s) for s in pipe.stream_together(requests)], solo):
        assert_same(got, want)


def test_mixed_puts_int4_in_the_talkers_layers_and_int8_in_the_predictor_and_heads():
    """Qwen3-TTS 0.6B at its real widths (one talker layer), quantize="mixed": the talker's decoder layer's matmuls
    int4 (a quarter of a bfloat16 byte count, with group scales), the code predictor's layers and heads, the
    codec head and the text projection int8; the load report splits the count; a request runs."""
    with load_pipeline("random:qwen3-tts-0.6b?layers=1", device="cpu", dtype="bfloat16", quantize="mixed") as pipe:
        talker = pipe.talker
        assert all(isinstance(m, Int4Linear) for m in talker.model.layers[0].modules() if isinstance(m, QUANTIZED))
        four = [m for m in talker.model.modules() if isinstance(m, Int4Linear)]
        eight = [m for m in talker.modules() if isinstance(m, Int8Linear)]
        assert len(four) == 4 and len(eight) == 5 * 4 + 15 + 1 + 2  # as int8's count, the talker layer moved to int4
        assert all(isinstance(h, Int8Linear) for h in talker.code_predictor.lm_head)
        assert isinstance(talker.codec_head, Int8Linear)
        assert f"mixed weights: {len(four) + len(eight)} matmuls (4 int4, {len(eight)} int8)" in pipe.load_report
        assert pipe.info["quantize"] == "mixed"
        result = pipe.generate(SpeechRequest("A short one.", max_frames=2, predictor="kv"))
        long_prompts_prefilled_together_equal_their_solo_runs(pipe)
    assert result.codes.shape == (2, 16)


def test_bad_quantize_options_are_refused_with_a_reason(capsys):
    from app.cli import parse_args

    with pytest.raises(ValueError, match="quantize must be None or one of int8, int4, mixed"):
        load_pipeline("tiny", device="cpu", quantize="int2")
    with pytest.raises(ValueError, match="exact=True gives the official implementation's bits, which int8"):
        load_pipeline("tiny", device="cpu", quantize="int8", exact=True)
    with pytest.raises(SystemExit):
        parse_args(["--exact", "--quantize", "int8"])
    assert "--exact gives the official implementation's bits" in capsys.readouterr().err


def test_the_app_starts_with_int8_weights_and_says_so(tmp_path):
    from app.cli import parse_args
    from tests.conftest import launch_app

    assert parse_args(["--quantize", "int8"]).quantize == "int8" and parse_args([]).quantize is None
    with launch_app(tmp_path, args=("--quantize", "int8"), OMNI_MODEL="tiny-tts") as url:
        with urllib.request.urlopen(url, timeout=10) as page:
            assert page.status == 200
    log = (tmp_path / "server.log").read_text()
    assert "int8 weights: 16 matmuls" in log, log[-2000:]


def test_the_command_line_synthesizes_with_int8_weights(tmp_path):
    out = tmp_path / "a.wav"
    proc = subprocess.run([sys.executable, "-m", "omni_core", "synth", "Hello.", "--model", "tiny-tts",
                           "--quantize", "int8", "--max-frames", "3", "--out", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "int8 weights" in proc.stderr and sf.info(str(out)).frames == 3 * 1920


def test_the_measured_gain_takes_the_largest_weights_of_a_stack_of_two_widths():
    """quant.measured_gain on layers of two widths (as 1.7B's talker beside its predictor): a ratio, no shape
    error; a stack too small to leave the caches gives None."""
    from torch import nn

    from omni_core.models.layers import MLP
    from omni_core.models.quant import measured_gain

    stack = nn.ModuleList([MLP(2048, 6144) for _ in range(3)] + [MLP(1024, 3072)]).to(torch.bfloat16)
    gain = measured_gain(stack, repeats=1)
    assert gain is not None and gain > 0
    assert measured_gain(nn.ModuleList([MLP(64, 128)])) is None
