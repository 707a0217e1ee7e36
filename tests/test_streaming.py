"""StreamingDecoder (omni_core/codec/streaming.py): pushing codes chunk by chunk gives the whole
decode (float32 up to rounding, float64 exactly), for any chunk size, fewer codebooks, batch rows
and bfloat16; the first frame's audio comes at once; a stream keeps its batch size. Several streams
pushed together (one codec call) give what each gives alone, and go on alone afterwards."""

from __future__ import annotations

import copy

import pytest
import torch

from omni_core.codec.streaming import StreamingDecoder, push_together

from .codec_models import NUM_FRAMES, PRESETS, models, random_codes, stream_all


@pytest.fixture(scope="module", params=PRESETS)
def pair(request):
    return models(request.param)


@torch.no_grad()
@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 25, NUM_FRAMES])
def test_stream_equals_whole_decode(pair, chunk):
    _, ours = pair
    codes = random_codes()
    whole = ours(codes)
    streamed, sizes = stream_all(ours, codes, chunk)
    assert streamed.shape == whole.shape
    torch.testing.assert_close(streamed, whole, atol=1e-4, rtol=0)
    spf = ours.cfg.samples_per_frame
    assert sizes[0] == min(chunk, NUM_FRAMES) * spf - (spf - ours.num_samples(1)) > 0  # audio from frame 1


@torch.no_grad()
def test_stream_is_exact_in_float64():
    """In float32 the stream differs from the whole decode by rounding only; float64 shows it."""
    _, ours = models("tiny-b")
    wide = copy.deepcopy(ours).double()
    codes = random_codes(seed=1)
    streamed, _ = stream_all(wide, codes, 3)
    torch.testing.assert_close(streamed, wide(codes), atol=1e-10, rtol=0)


@torch.no_grad()
@pytest.mark.parametrize("k", [1, 5])
def test_stream_of_fewer_codebooks_equals_their_whole_decode(pair, k):
    _, ours = pair
    codes = random_codes()
    torch.testing.assert_close(stream_all(ours, codes, 4, num_codebooks=k)[0], ours(codes, num_codebooks=k),
                               atol=1e-4, rtol=0)


@torch.no_grad()
def test_batch_rows_stream_independently(pair):
    _, ours = pair
    codes = random_codes(batch=3, seed=2)
    streamed, _ = stream_all(ours, codes, 4)
    for row in range(3):
        torch.testing.assert_close(streamed[row:row + 1], ours(codes[row:row + 1]), atol=1e-4, rtol=0)


@torch.no_grad()
def test_counters_and_holdback():
    _, ours = models("tiny")
    stream = StreamingDecoder(ours)
    assert stream.holdback == 555
    first = stream.push(random_codes(num_frames=1))
    second = stream.push(random_codes(num_frames=2, seed=1))
    assert (first.shape[-1], second.shape[-1]) == (1920 - 555, 2 * 1920)
    assert (stream.num_frames, stream.num_samples) == (3, ours.num_samples(3))


@torch.no_grad()
def test_bfloat16_stream_smoke():
    _, ours = models("tiny")
    half = copy.deepcopy(ours).to(torch.bfloat16)
    streamed, _ = stream_all(half, random_codes(num_frames=5), 2)
    assert streamed.dtype == torch.bfloat16 and streamed.shape == (1, 1, ours.num_samples(5))
    assert torch.isfinite(streamed).all() and streamed.float().std() > 0.01


def test_a_stream_keeps_its_rows_and_an_empty_push_is_empty():
    _, ours = models("tiny")
    stream = StreamingDecoder(ours)
    stream.push(random_codes(batch=2, num_frames=1))
    with pytest.raises(ValueError, match="rows"):
        stream.push(random_codes(batch=1, num_frames=1))
    assert stream.push(random_codes(batch=2, num_frames=0)).shape == (2, 1, 0)


def push_in_chunks(stream: StreamingDecoder, codes: torch.Tensor, chunks) -> torch.Tensor:
    bounds = torch.tensor((0, *chunks)).cumsum(0).tolist()
    return torch.cat([stream.push(codes[..., a:b]) for a, b in zip(bounds, bounds[1:])], dim=-1)


@torch.no_grad()
def test_streams_pushed_together_give_their_own_audio_and_go_on_alone(pair):
    """The engine's batched codec pushes: three requests' streams at the same position, chunks of
    1, 2, 4, 8 frames together, then 5 more frames each alone: every stream's audio is its own
    bit for bit, and so are its counters."""
    _, ours = pair
    codes = [random_codes(seed=10 + i, num_frames=20) for i in range(3)]
    chunks = (1, 2, 4, 8, 5)  # as the engine pushes: 1, 2, 4, 8 frames together, then the rest alone
    alone = [push_in_chunks(StreamingDecoder(ours), c, chunks) for c in codes]
    streams, heard = [StreamingDecoder(ours) for _ in codes], [[] for _ in codes]
    start = 0
    for n in chunks[:-1]:
        for got, h in zip(push_together(streams, [c[..., start:start + n] for c in codes]), heard):
            h.append(got)
        start += n
    for stream, c, h in zip(streams, codes, heard):
        h.append(stream.push(c[..., start:]))
    for h, want, stream in zip(heard, alone, streams):
        assert torch.equal(torch.cat(h, dim=-1), want)  # bit for bit: the engine keeps rows exact
        assert stream.num_frames == 20 and stream.num_samples == want.shape[-1]


@torch.no_grad()
def test_only_streams_at_one_position_with_chunks_of_one_length_push_together(pair):
    _, ours = pair
    codes = random_codes(seed=3, num_frames=4)
    a, b = StreamingDecoder(ours), StreamingDecoder(ours)
    a.push(codes[..., :1])
    with pytest.raises(ValueError, match="same position"):
        push_together([a, b], [codes[..., 1:2], codes[..., :1]])
    with pytest.raises(ValueError, match="same number of frames"):
        push_together([a, b], [codes[..., 1:2], codes[..., :2]])
    assert (a.num_frames, b.num_frames) == (1, 0)  # a refused push changes nothing
    first = push_in_chunks(StreamingDecoder(ours), codes, (1,))
    torch.testing.assert_close(torch.cat([first, a.push(codes[..., 1:])], dim=-1),
                               push_in_chunks(StreamingDecoder(ours), codes, (1, 3)), atol=0, rtol=0)
