"""`Runner`: the only place that calls the models.

Per request: admission (prompts and codec stream, as the model's family admits a request:
families/). Batched, for all rows at once: the next piece of each request's
thinker prompt (chat mode) or talker prompt, packed into one call (`prefill`; pieces of
`prefill_chunk` positions: the engine runs a few pieces a step, so a long prompt cannot stall the
rows already speaking), one thinker token, the talker's next inputs and one talker step (ragged cache
lengths), the codec head, and one code-predictor call for every row, each on its kind (both kinds in one pass
eager: fast/predictors.py). A row's floats do not depend on its neighbours: matmul rows are batch-invariant
(`invariant.linear`), attention runs per row (the predictor's: per kind, on one thread), each row samples
from its own generators.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from omni_core.engine.codec_stream import Codec, CodecStream, LocalCodec
from omni_core.engine.sequence import Sequence
from omni_core.engine.speech_model import SpeechModel
from omni_core.events import TextDelta
from omni_core.models.invariant import prompt_pieces
from omni_core.models.layers import KVCache
from omni_core.models.sampling import (choose, choose_with_alternatives, draw_noise, repetition_penalty,
                                       suppress)


@contextmanager
def lengths_kept_on_error(caches: list[KVCache]):
    """A batched step that raises leaves every cache at its old length, so a row run again alone
    writes the same positions (what was written past the length is overwritten)."""
    lengths = [c.length for c in caches]
    try:
        yield
    except Exception:
        for cache, length in zip(caches, lengths):
            cache.length = length
        raise


PREDICTOR_KINDS = {"reprefill": ("reprefill",), "kv": ("kv",), "compare": ("reprefill", "kv")}
# A prompt is prefilled in pieces of at most this many positions. The pieces depend on the prompt alone
# (never on what else the step holds), so a request's floats do not depend on its neighbours; a prompt
# this long or shorter is one piece, as the official implementations prefill it.
PREFILL_CHUNK = 128


class Runner:
    def __init__(self, model: SpeechModel):
        self.model = model
        self.prefill_chunk = PREFILL_CHUNK
        # Where the codec streams decode: in the engine's thread, or a CodecPool's processes (engine/codec_pool.py)
        self.codec: Codec = LocalCodec(model.code2wav)

    # ---- one request ----------------------------------------------------------------------------

    def admit(self, seq: Sequence, audio: bool = True) -> None:
        """Prompts and codec stream (audio=False: none, for scoring), as the model's family admits a request
        (families/): for chat mode the thinker's prompt to prefill (`prefill`), for Qwen3-TTS the talker's."""
        self.model.family.admit(self.model, seq, self.new_stream if audio else _no_stream)

    def prefill_thinker(self, seq: Sequence) -> int:
        """The next piece of the thinker's prompt; after the last, the reply's first token. → positions run."""
        n = min(self.prefill_chunk, seq.thinker_todo.shape[1])
        (logits,) = self.prefill("thinker", [seq])
        if logits is not None:
            self.take_token(seq, logits)
        return n

    def new_stream(self, prefix: torch.Tensor | None = None) -> CodecStream:
        """A request's codec stream, where the engine's codec decodes (engine/codec_stream.py: in its thread, or
        in a codec process). prefix [Q, n]: codes decoded first whose audio is not wanted (a clone's reference)."""
        return self.codec.open(prefix)

    def take_token(self, seq: Sequence, logits: torch.Tensor) -> None:
        """logits [1, V] → the reply's next token (HF: the thinker never feeds back its last)."""
        token, _ = choose(logits, seq.sampling, seq.gen_thinker)
        seq.reply.add(int(token))
        seq.last_token = token
        if int(token) == self.model.im_end or len(seq.reply.ids) == seq.max_text_tokens:
            seq.reply.finish()
            seq.thinker_cache = None
        new = seq.reply.spoken[seq.shown:]
        if new:
            seq.shown += len(new)
            seq.emit(TextDelta(self.model.tokenizer.decode(new, skip_special_tokens=True), new))

    def start_talker(self, seq: Sequence) -> None:
        """The talker's prompt (once the reply's first tokens are known) and its cache; `prefill_talker`
        runs it."""
        m = self.model
        prompt = m.family.talker_prompt(m, seq)
        seq.talker_cache = m.talker.model.new_cache(1, prompt.shape[1] + 64, like=prompt)
        seq.talker_todo = prompt

    def prefill_talker(self, seq: Sequence) -> int:
        """The next piece of the talker's prompt; after the last, the hidden state the first frame's CB0 is
        read from (`seq.hidden`). → positions run."""
        n = min(self.prefill_chunk, seq.talker_todo.shape[1])
        self.prefill("talker", [seq])
        return n

    def _cut(self, todo: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A prompt's positions still to prefill [1, n, ...] → (the next piece, the rest; None when none)."""
        n = self.prefill_chunk
        return todo[:, :n], (todo[:, n:] if todo.shape[1] > n else None)

    # ---- all rows at once: each returns one result per row, so a failed call can be run again row by row

    def prefill(self, stage: str, seqs: list[Sequence]) -> list[torch.Tensor | None]:
        """The next piece of each request's prompt for `stage` ("thinker" or "talker") → per request, after its
        thinker prompt's last piece the logits [1, V] its reply's first token is chosen from (`take_token`),
        else None; after the talker prompt's last piece its first frame's hidden state is `seq.hidden`.
        Several requests: one call, their pieces packed (`DecoderStack.prefill_rows`); one: its own call, shaped
        as the official code shapes it (the logits from all its positions), which is exact mode's. Either way
        each piece's matmuls run as one call of its own rows on the fastest kernel (`prompt_pieces`): a piece's
        floats are those of its own length, never of its neighbours'. A call that raises leaves every request
        as it was."""
        m, thinker = self.model, stage == "thinker"
        stack = m.thinker.model if thinker else m.talker.model
        cuts = [self._cut(s.thinker_todo if thinker else s.talker_todo) for s in seqs]
        pieces = [m.thinker.embed(piece) if thinker else piece for piece, _ in cuts]
        caches = [s.thinker_cache if thinker else s.talker_cache for s in seqs]
        ends = [rest is None for _, rest in cuts]  # whose last piece this is
        lone = len(seqs) == 1
        with lengths_kept_on_error(caches):
            with prompt_pieces(piece.shape[1] for piece in pieces):  # each piece's matmuls a call of its own
                hidden = [stack(pieces[0], caches[0], caches[0].length)] if lone else stack.prefill_rows(pieces, caches)
            if lone:  # hidden [1, T, C]
                out = [m.thinker.lm_head(hidden[0])[:, -1] if thinker and ends[0] else hidden[0][:, -1]]
            else:
                out = [h[:, -1] for h in hidden]  # [1, C]
                if thinker and any(ends):  # the reply's first tokens: one matmul of the last pieces' last rows
                    logits = iter(m.thinker.lm_head(torch.cat([h for h, end in zip(out, ends) if end])).split(1))
                    out = [next(logits) if end else None for end in ends]
        for seq, (_, rest), last, end in zip(seqs, cuts, out, ends):
            if thinker:
                seq.thinker_todo = rest
            else:
                seq.talker_todo, seq.hidden = rest, (last if end else seq.hidden)
        return [last if thinker and end else None for last, end in zip(out, ends)]

    def think(self, seqs: list[Sequence]) -> list[torch.Tensor]:
        """One thinker token for each row: logits [1, V] per row."""
        ids = torch.cat([s.last_token for s in seqs])  # [B]
        caches = [s.thinker_cache for s in seqs]
        with lengths_kept_on_error(caches):
            return list(self.model.thinker.decode_rows(ids, caches).split(1))

    def talk(self, seqs: list[Sequence]) -> list[torch.Tensor]:
        """One talker step for every row → each row's hidden state [1, C] for its next frame (`seq.hidden`)."""
        caches = [s.talker_cache for s in seqs]
        with lengths_kept_on_error(caches):
            hidden = self.model.talker.model.decode_rows(self.next_inputs(seqs), caches)  # [B, 1, C]
        rows = list(hidden[:, -1].split(1))
        for seq, row in zip(seqs, rows):
            seq.hidden = row
        return rows

    def frame_made(self, seq: Sequence) -> None:
        """The frame is out: its hidden state is spent (the row's next frame takes a talker step first)."""
        seq.hidden = None

    def next_inputs(self, seqs: list[Sequence]) -> torch.Tensor:
        """The talker's next input for every row [B, 1, C]: the last frame's summed codec embedding plus text
        step k-1 (k: frames made), as the family reads its text steps (rows are independent: the sums are per
        row, a text projection's matmul rows batch-invariant)."""
        talker = self.model.talker
        codes = talker.embed_codes(torch.cat([s.last_cb0 for s in seqs]), torch.cat([s.last_embeds for s in seqs]))
        return codes + self.model.family.text_inputs(seqs)

    def choose_cb0(self, seqs: list[Sequence]) -> list[tuple[torch.Tensor, ...]]:
        """CB0 for every row from one codec-head matmul → per row CB0 [1], its probability [1], and the top-5
        ids [1, 5] and probabilities [1, 5] of the same processed distribution (HF's processing). Rows alike
        (sampling settings, repetition penalty, frames made) are processed as one [b, V] batch, each with its
        own history and generator; every operation works row by row (gather, scatter, softmax, top-k), so a
        row gets the bits it gets alone (tests/test_runner.py). The histories grow once every group is done,
        so a call that raises leaves every row as it was (and each runs again alone)."""
        logits = self.model.talker.codec_head(torch.cat([s.hidden for s in seqs]))  # [B, V]
        alike: dict[tuple, list[int]] = {}
        for i, s in enumerate(seqs):
            alike.setdefault((s.sampling, s.req.repetition_penalty, s.history.shape[1]), []).append(i)
        gens = [s.gen_talker for s in seqs if s.sampling.do_sample]
        states = [g.get_state() for g in gens]
        out: list = [None] * len(seqs)
        try:
            for rows in alike.values():
                for i, chosen in zip(rows, self._choose_alike([seqs[i] for i in rows], logits[rows])):
                    out[i] = chosen
        except Exception:  # the noise was drawn: put the generators back, so a row run again draws the same
            for g, state in zip(gens, states):
                g.set_state(state)
            raise
        for seq, (cb0, *_) in zip(seqs, out):
            seq.history = torch.cat([seq.history, cb0[:, None]], dim=1)
        return out

    def _choose_alike(self, seqs: list[Sequence], logits: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
        """`choose_cb0` for rows alike: logits [b, V] → per row (CB0 [1], p [1], top ids [1, 5], top p [1, 5])."""
        first, history = seqs[0], torch.cat([s.history for s in seqs])  # [b, frames]
        logits = suppress(repetition_penalty(logits, history, first.req.repetition_penalty),
                          self.model.cb0_mask(history.shape[1]))
        noise = None
        if first.sampling.do_sample:  # each row's own draw, as alone: [1, V] from its generator
            noise = torch.cat([draw_noise((1, logits.shape[1]), s.gen_talker, logits.device) for s in seqs])
        chosen = choose_with_alternatives(logits, first.sampling, noise=noise)
        return [tuple(x[j:j + 1] for x in chosen) for j in range(len(seqs))]

    def predict(self, seqs: list[Sequence], cb0: dict) -> list[dict[str, tuple]]:
        """CB1..CB15 for every row, each on its request's predictor (a compare-mode row on both), in one
        predictor call → per row {kind: (codes, probs, embeds, top codes, top probs), each [1, ...]}."""
        preds = self.model.predictors
        jobs = [(s, kind) for s in seqs for kind in PREDICTOR_KINDS[s.req.predictor]]
        h = torch.cat([s.hidden for s, _ in jobs])  # [J, C]
        e0 = self.model.talker.model.codec_embedding(torch.cat([cb0[s][0] for s, _ in jobs]))
        graphs = [preds.uses_graph(kind, s.req.cuda_graph) for s, kind in jobs]
        gens = [s.gen_predictor[kind] if s.req.do_sample else None for s, kind in jobs]
        states = [g.get_state() for g in gens if g is not None]
        try:
            made = preds.run_rows([kind for _, kind in jobs], graphs, h, e0, gens)
        except Exception:  # the noise was drawn: put the generators back, so a row run again draws the same
            for g, state in zip([g for g in gens if g is not None], states):
                g.set_state(state)
            raise
        out: dict[Sequence, dict] = {s: {} for s in seqs}
        for j, ((seq, kind), graph) in enumerate(zip(jobs, graphs)):
            seq.stats.cuda_graph |= graph
            out[seq][kind] = tuple(x[j:j + 1] for x in made)
        return [out[s] for s in seqs]


def _no_stream(prefix: torch.Tensor | None = None) -> None:
    """A request admitted without audio (scoring) has no codec stream."""
    return None
