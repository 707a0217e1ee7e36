"""Bad input: each gets a clear message (what to change) or a clamp with a warning."""

from __future__ import annotations

import pytest

from omni_core import MAX_FRAMES, MAX_TEXT_CHARS, RequestError, SpeechRequest

SPEAKERS = ["aiden", "chelsie", "ethan"]

REFUSED = [  # (fields, words the message must contain)
    (dict(text=""), "text is empty"),
    (dict(text=" \n\t "), "text is empty"),
    (dict(text="\x00\x01\x02"), "text is empty"),
    (dict(text=None), "text must be a string"),
    (dict(text="hi", mode="sing"), "unknown mode"),
    (dict(text="hi", predictor="fast"), "unknown predictor 'fast': choose one of reprefill, kv, compare"),
    (dict(text="hi", speaker="nobody"), "unknown speaker 'nobody': choose one of aiden, chelsie, ethan"),
    (dict(text="hi", max_frames=0), "max_frames must be at least 1"),
    (dict(text="hi", max_frames=-5), "max_frames must be at least 1"),
    (dict(text="hi", max_frames="many"), "max_frames must be a whole number"),
    (dict(text="hi", temperature=0), "temperature must be between"),
    (dict(text="hi", temperature=float("nan")), "temperature must be a number"),
    (dict(text="hi", top_k=-1), "top_k must be between 0 and 2048"),
    (dict(text="hi", top_k=2.5), "top_k must be a whole number"),
    (dict(text="hi", top_p=1.5), "top_p must be between"),
    (dict(text="hi", top_p=0), "top_p must be between"),
    (dict(text="hi", seed=-1), "seed must be between"),
    (dict(text="hi", seed=2**64), "seed must be between"),
    (dict(text="hi", repetition_penalty=0.5), "repetition_penalty must be between"),
    (dict(text="hi", max_text_tokens=0), "max_text_tokens must be at least 1"),
]


@pytest.mark.parametrize("fields,message", REFUSED, ids=[m for _, m in REFUSED])
def test_refused_with_a_clear_message(fields, message):
    with pytest.raises(RequestError, match=message.replace("(", r"\(")):
        SpeechRequest(**fields).checked(SPEAKERS)


ACCEPTED = [  # (fields, expected clean values, warning words or None)
    (dict(text="x" * (MAX_TEXT_CHARS + 50)), dict(text="x" * MAX_TEXT_CHARS), "only the first"),
    (dict(text="hi", max_frames=10**9), dict(max_frames=MAX_FRAMES), "above the limit"),
    (dict(text="hi", max_text_tokens=10**6), dict(max_text_tokens=512), "above the limit"),
    (dict(text="a\x07b\x1bc"), dict(text="a b c"), None),
    (dict(text="emoji 👋🏽 and עברית"), dict(text="emoji 👋🏽 and עברית"), None),
    (dict(text="bad \ud800 surrogate"), dict(text="bad ? surrogate"), None),
    (dict(text="hi", speaker=" Ethan "), dict(speaker="ethan"), None),
    (dict(text="hi", predictor="KV"), dict(predictor="kv"), None),
    (dict(text="hi", seed=5.0, max_frames=12.0), dict(seed=5, max_frames=12), None),
]


@pytest.mark.parametrize("fields,clean,warning", ACCEPTED)
def test_accepted_and_cleaned(fields, clean, warning):
    request, warnings = SpeechRequest(**fields).checked(SPEAKERS)
    for key, value in clean.items():
        assert getattr(request, key) == value
    if warning is None:
        assert warnings == []
    else:
        assert any(warning in w for w in warnings)


def test_pipeline_refuses_before_any_work():
    from .conftest import our_pipeline
    with pytest.raises(RequestError, match="unknown predictor"):
        our_pipeline("tiny").stream(SpeechRequest("hi", predictor="nope"))
