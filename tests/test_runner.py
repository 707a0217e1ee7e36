"""`Runner` (omni_core/engine/runner.py), the only caller of the models: admission in speak mode (no
thinker) and chat mode (prefill, first token), reply tokens up to the limit, the talker's prefill
(in pieces: the same floats as one prefill where the prompt is one piece), CB0 with its alternatives,
and one predictor call for both kinds with compare rows in both."""

from __future__ import annotations

import pytest
import torch

from omni_core import SpeechRequest, TextDelta
from omni_core.codec.streaming import StreamingDecoder
from omni_core.engine.runner import Runner
from omni_core.engine.sequence import Sequence

from .conftest import our_pipeline


@pytest.fixture
def runner():
    with torch.no_grad():
        yield Runner(our_pipeline("tiny").model)


def new(runner, **fields) -> Sequence:
    m = runner.model
    return Sequence(SpeechRequest(fields.pop("text", "Hello."), **fields), [], m.device, m.dtype)


def events(seq) -> list:
    out = []
    while not seq.events.empty():
        out.append(seq.events.get())
    return out


def test_speak_admission_takes_the_text_as_the_reply_without_the_thinker(runner):
    m = runner.model
    seq = new(runner, text="Say this.")
    runner.admit(seq)
    ids = m.tokenizer("Say this.", add_special_tokens=False)["input_ids"]
    assert seq.prompt_ids == m.chat_prompt("Say this.") and seq.reply.ids == ids + [m.im_end] and seq.reply.done
    assert seq.thinker_cache is None and isinstance(seq.decoder, StreamingDecoder) and seq.can_talk
    (delta,) = events(seq)
    assert isinstance(delta, TextDelta) and delta.text == "Say this." and delta.token_ids == ids


def test_chat_admission_prefills_and_the_reply_stops_at_max_text_tokens(runner):
    seq = new(runner, mode="chat", max_text_tokens=3)
    runner.admit(seq)
    assert seq.thinker_todo.shape == (1, len(seq.prompt_ids)) and not seq.reply.ids and not seq.wants_token()
    assert runner.prefill_thinker(seq) == len(seq.prompt_ids) and seq.thinker_todo is None
    assert seq.max_text_tokens == 3 and len(seq.reply.ids) == 1 and not seq.reply.done
    assert seq.thinker_cache is not None and seq.last_token.shape == (1,)
    while not seq.reply.done:
        runner.take_token(seq, runner.think([seq])[0])
    assert len(seq.reply.ids) == 3 and seq.thinker_cache is None
    spoken = [t for e in events(seq) for t in e.token_ids]
    assert spoken == seq.reply.spoken  # each token sent once, never the last


def test_the_talker_starts_then_cb0_comes_with_its_alternatives(runner):
    m = runner.model
    seq = new(runner)
    runner.admit(seq)
    runner.start_talker(seq)
    assert not seq.talking and seq.hidden is None
    assert runner.prefill_talker(seq) == seq.talker_cache.length  # a short prompt: one piece
    assert seq.talking and seq.hidden.shape == (1, m.config.talker.hidden_size)
    cb0, p0, top, top_probs = runner.choose_cb0([seq])[0]
    assert cb0.shape == p0.shape == (1,) and top.shape == top_probs.shape == (1, 5)
    assert int(top[0, 0]) == int(cb0) and 0 < float(p0) <= 1  # greedy: the most probable
    assert not m.family.suppress_mask[top[0]].any()  # never a suppressed special id
    assert seq.history.tolist() == [[int(cb0)]]


def test_cb0_for_rows_alike_in_one_batch_is_each_rows_own(runner):
    """choose_cb0 processes rows alike (sampling, penalty, frames made) as one batch: every row's CB0, its
    probability and its alternatives are bit for bit what the row gets alone, and each sampled row draws
    from its own generator."""
    m = runner.model
    fields = [dict(), dict(), dict(do_sample=True, seed=1), dict(do_sample=True, seed=2), dict(do_sample=True, seed=1),
              dict(repetition_penalty=1.3), dict(repetition_penalty=1.3), dict(top_k=5, do_sample=True, seed=3)]
    g = torch.Generator().manual_seed(0)

    def rows():
        made = [new(runner, **{"repetition_penalty": 1.05, **f}) for f in fields]
        for seq in made:
            seq.hidden = torch.randn(1, m.config.talker.hidden_size, generator=g)
            seq.history = torch.randint(0, 2000, (1, 6), generator=g)
        return made

    together, alone = rows(), rows()
    for a, b in zip(together, alone):
        a.hidden, a.history = b.hidden, b.history
    got = runner.choose_cb0(together)
    for seq, chosen in zip(alone, got):
        want = runner.choose_cb0([seq])[0]
        for x, y in zip(chosen, want):
            assert torch.equal(x, y)
    assert all(torch.equal(a.history, b.history) for a, b in zip(together, alone))


def test_a_cb0_call_that_raises_leaves_every_row_as_it_was(runner, monkeypatch):
    """A row that fails after other groups were chosen: no row's history has grown and no generator has moved,
    so each row run again alone gets what it gets alone."""
    m = runner.model
    seqs = [new(runner, repetition_penalty=1.0, do_sample=True, seed=1), new(runner, repetition_penalty=1.1)]
    for seq in seqs:
        seq.hidden = torch.randn(1, m.config.talker.hidden_size)
    want = [tuple(x.clone() for x in runner.choose_cb0([s])[0]) for s in seqs]
    for seq in seqs:  # back to before: one frame less, the generator rewound
        seq.history = seq.history[:, :0]
    seqs[0].gen_talker.manual_seed(1)
    real = runner._choose_alike

    def second_group_fails(rows, logits):
        if rows[0] is seqs[1]:
            raise RuntimeError("a bad row")
        return real(rows, logits)

    monkeypatch.setattr(runner, "_choose_alike", second_group_fails)
    with pytest.raises(RuntimeError, match="a bad row"):
        runner.choose_cb0(seqs)
    assert all(seq.history.shape == (1, 0) for seq in seqs)
    monkeypatch.undo()
    for seq, expected in zip(seqs, want):
        assert all(torch.equal(x, y) for x, y in zip(runner.choose_cb0([seq])[0], expected))


def test_predict_makes_one_call_for_both_kinds_and_compare_rows_get_both(runner):
    """Eager on a CPU: one predictor call a step for every row of both kinds; a compare-mode row gets both, and
    each row the floats its kind gives it alone."""
    m = runner.model
    seqs = [new(runner, predictor=p) for p in ("reprefill", "kv", "compare")]
    g = torch.Generator().manual_seed(0)
    for s in seqs:
        s.hidden = torch.randn(1, m.config.talker.hidden_size, generator=g)
    cb0 = {s: (torch.tensor([7 + i]),) for i, s in enumerate(seqs)}
    calls_before = m.predictors.calls
    out = runner.predict(seqs, cb0)
    assert m.predictors.calls - calls_before == 1
    assert [sorted(kinds) for kinds in out] == [["reprefill"], ["kv"], ["kv", "reprefill"]]
    codes, probs, embeds, top, top_probs = out[2]["kv"]
    assert codes.shape == (1, 15) and embeds.shape == (1, 15, m.config.talker.hidden_size) and top.shape == (1, 15, 5)
    torch.testing.assert_close(out[2]["kv"][0], out[2]["reprefill"][0])  # float32 greedy: they agree
    for seq, kinds in zip(seqs, out):
        alone = runner.predict([seq], cb0)[0]
        for kind, made in kinds.items():
            assert all(torch.equal(x, y) for x, y in zip(made, alone[kind]))


@pytest.mark.parametrize("chunk", [1, 5, 16])
def test_a_prompt_prefilled_in_pieces_fills_the_cache_and_ends_where_one_prefill_does(runner, chunk):
    """Pieces of `chunk` positions against the cache: the last hidden state and every cached K/V as one
    prefill gives them, up to float rounding (a piece's matmuls have other row counts), and the same
    floats every time it is cut the same way."""
    whole = new(runner, text="A longer sentence, so that its prompt takes several pieces.")
    runner.admit(whole)
    runner.start_talker(whole)
    runner.prefill_talker(whole)
    runner.prefill_chunk = chunk
    runs = []
    for _ in range(2):
        seq = new(runner, text="A longer sentence, so that its prompt takes several pieces.")
        runner.admit(seq)
        runner.start_talker(seq)
        pieces = []
        while not seq.talking:
            pieces.append(runner.prefill_talker(seq))
        assert sum(pieces) == whole.talker_cache.length and max(pieces) == chunk and len(pieces) > 1
        runs.append(seq)
    torch.testing.assert_close(runs[0].hidden, whole.hidden, rtol=1e-4, atol=1e-5)
    for layer in range(len(whole.talker_cache.k)):
        n = whole.talker_cache.length
        torch.testing.assert_close(runs[0].talker_cache.k[layer][:, :, :n], whole.talker_cache.k[layer][:, :, :n],
                                   rtol=1e-4, atol=1e-5)
    assert torch.equal(runs[0].hidden, runs[1].hidden)
