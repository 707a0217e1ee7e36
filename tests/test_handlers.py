"""The app's handlers (app/handlers.py): one error helper for every handler, component values →
a SpeechRequest, and `Lab` on the tiny pipeline: a streamed take, the codes API, redraw, listen,
upload, stop."""

from __future__ import annotations

import io

import gradio as gr
import numpy as np
import pytest
import soundfile as sf

from app.files import OutputDir, to_int16
from app.handlers import Lab, SynthOut, reports_errors, user_error
from app.take import Take
from omni_core import RequestError, SpeechRequest

from .conftest import our_pipeline


def lab(tmp_path, streaming: bool = True) -> Lab:
    return Lab(our_pipeline("tiny"), OutputDir(tmp_path), streaming=streaming)


def test_user_error_says_what_to_change_or_that_something_went_wrong():
    given = gr.Error("as is")
    assert user_error(given) is given
    clear = user_error(RequestError("text is empty"))
    assert isinstance(clear, gr.Error) and clear.message == "text is empty" and clear.title == "Cannot do that"
    other = user_error(RuntimeError("boom"))
    assert "Something went wrong (RuntimeError: boom)" in other.message and "server log" in other.message


def test_reports_errors_wraps_functions_and_generators():
    @reports_errors
    def function(x):
        raise ValueError(f"bad {x}")

    @reports_errors
    def generator():
        yield 1
        raise KeyError("k")

    with pytest.raises(gr.Error, match="bad 3"):
        function(3)
    gen = generator()
    assert next(gen) == 1
    with pytest.raises(gr.Error, match="Something went wrong"):
        next(gen)


def test_component_values_become_a_request(tmp_path):
    request = lab(tmp_path).request(None, "chat", "", "kv", True, 1, 0.7, 20, 0.9, None, 0)
    assert request == SpeechRequest(text="", mode="chat", speaker=None, predictor="kv", cuda_graph=None,
                                    do_sample=True, temperature=0.7, top_k=20, top_p=0.9, seed=0, max_frames=None)


def test_synthesize_streams_then_finishes_with_the_downloads(tmp_path):
    outs = list(lab(tmp_path).synthesize("Hello.", "speak", "ethan", "reprefill", False, False, 1.0, 50, 1.0, 0,
                                         6, "codes"))
    assert all(isinstance(o, SynthOut) for o in outs) and len(outs) >= 2
    first, last = outs[0], outs[-1]
    assert first.audio is None and "Waiting for the first frame" in first.heatmap.layout.annotations[0].text
    take = last.take
    assert take.finished and take.frames == 6 and take.cancel.is_set()  # the request is let go
    names = sorted(p.rsplit("/", 1)[-1] for p in last.files)
    assert names == ["codes.json", "codes.npy", "speech.wav"] and "6 frames" in last.heatmap.layout.title.text
    assert "reached the frame limit" in last.stats
    chunks = [o.audio for o in outs if isinstance(o.audio, bytes)]  # WAV bytes: Gradio's cache file is skipped
    assert len(chunks) >= 2
    heard = np.concatenate([sf.read(io.BytesIO(c), dtype="int16")[0] for c in chunks])
    np.testing.assert_array_equal(heard, to_int16(take.audio_array()))  # every sample, once, in order


def test_a_bad_request_fails_before_the_page_is_cleared(tmp_path):
    with pytest.raises(gr.Error, match="text is empty"):
        next(lab(tmp_path).synthesize("  ", "speak", None, "reprefill", False, False, 1.0, 50, 1.0, 0, 4, "codes"))


def test_codes_api_returns_the_codes_and_a_wav(tmp_path):
    doc, wav = lab(tmp_path).codes("Hello.", max_frames=3)
    assert np.asarray(doc["codes"]).shape == (3, 16) and doc["text"] == "Hello." and doc["stats"]["frames"] == 3
    assert sf.info(wav).samplerate == 24000


def test_redraw_listen_upload_and_stop(tmp_path):
    the_lab = lab(tmp_path, streaming=False)
    assert not the_lab.redraw("codes", None).data
    with pytest.raises(gr.Error, match="No codes yet"):
        the_lab.listen(4, Take())
    codes = np.random.default_rng(0).integers(0, 2048, (5, 16))
    path = tmp_path / "mine.npy"
    np.save(path, codes)
    figure, panel, audio, num_codebooks, files, take = the_lab.upload(str(path), "codes")
    assert take.frames == 5 and "mine.npy" in panel and num_codebooks == 16 and len(files) == 3
    assert audio[0] == 24000 and audio[1].dtype == np.int16
    assert the_lab.upload(None, "codes") == (gr.skip(),) * 6
    sr, coarse = the_lab.listen(2, take)
    assert len(coarse) == len(audio[1]) and not np.array_equal(coarse, audio[1])  # two codebooks sound different
    assert the_lab.redraw("confidence", take).layout.annotations  # uploads carry no probabilities
    the_lab.stop(take)
    assert take.cancel.is_set()
    the_lab.stop(None)  # no take: nothing to stop
