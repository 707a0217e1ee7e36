"""`Step`: one engine step over the scheduler's rows, a plain object the engine's thread drives.

`Step.run()` reads as one sentence: schedule (stop, pause, admit) → prefill newcomers'
prompts → think (one batched thinker token for every chat reply the talker is about to
read) → read the text callers sent (text still being written; a row waiting for more sits the
step out) → a frame for every row (`frame`): talk (prefill talker prompts, one batched talker
step) → CB0 for every row (rows alike as one batch) → one predictor call for all rows (both
kinds in one pass eager; a call per kind compiled or on a CUDA graph) → emit each row's frame
and audio. Rows still waiting for their first frame take that part first, in calls of their
own, so a newcomer's first audio does not wait for the older rows' whole step. With codec processes (`codec_threads`, `codec_processes`), emit sends the
chunks' codes and their audio comes back while the next step runs (engine/codec_process.py,
engine/codec_pool.py); the engine stays at most one step ahead of them.

Prefills run piece by piece (`Runner.prefill_chunk` positions; the pieces depend on the prompt
alone), one piece of each of several prompts packed into one model call (`Runner.prefill`: every
matmul over all the pieces' rows, each piece's attention over its own cache, so each request gets
its own prefill's floats). While some row is decoding, a step makes one such call per stage, of at
most `prefill_budget` prompt positions (whole pieces, in admission order, at least one piece), so a
long prompt admitted mid-stream delays the others' next frame by at most the budget's work, not its
whole prompt's, and a handful of short prompts arriving together all start in one step and one
call. With nothing decoding (requests arriving together at an idle engine) calls follow one another
until every prompt is read.

Whether a request ends is the scheduler's to say: at the step's start (`stop_reason`: cancelled,
out of time, stalled) and within it (`done_reason`: nothing to speak, codec EOS, its last frame);
`finish` is the one place a request ends with a result. Its calls run under the guard (guard.py).
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from omni_core.engine import output
from omni_core.engine.guard import Guard
from omni_core.engine.runner import Runner
from omni_core.engine.scheduler import Scheduler
from omni_core.engine.sequence import Sequence
from omni_core.engine.speech_model import SpeechModel

# Prompt positions a step may prefill while rows are decoding, one piece per prompt: four pieces. One piece
# (128) let only two of the tiny model's ~60-position prompts start per step, so 8 requests arriving beside
# a speaking one heard their first audio over four steps.
PREFILL_BUDGET = 512


class Step:
    def __init__(self, scheduler: Scheduler, runner: Runner, guard: Guard, left_line: Callable[[int], None]):
        """left_line(n): n waiting requests were admitted (the engine counts the waiting line)."""
        self.scheduler, self.runner, self.guard, self.left_line = scheduler, runner, guard, left_line
        self.steps_taken = 0
        self.prefill_budget = PREFILL_BUDGET  # prompt positions a step may prefill while rows decode
        self.prefill_left: int | None = None  # prompt positions this step may still prefill (None: no limit)
        self.codec_mark = None  # where the codec's pushes stood when the current step began (`Codec.mark`)

    @property
    def model(self) -> SpeechModel:
        return self.runner.model

    def run(self) -> None:
        self.guard.new_step(self.scheduler.running)
        # A step's audio may still decode while the next step runs, no longer: pushes from steps before it wait
        self.codec_mark = self.runner.codec.mark()
        self.schedule()
        rows = self.scheduler.rows()
        decoding = any(s.decoding for s in rows)
        # The budget holds at least one piece, so a prompt always advances.
        self.prefill_left = max(self.prefill_budget, self.runner.prefill_chunk) if decoding else None
        self.prefill([s for s in rows if s.thinker_todo is not None], "thinker")
        self.think([s for s in rows if s.wants_token()])
        self.read_text([s for s in rows if s.feed is not None])
        talking = [s for s in rows if s.can_talk and not s.awaiting_text]
        # Newcomers first, in calls of their own: their first frame and audio come out before the older rows'
        # step, not after it (rows are batch-invariant: the split changes no row's floats).
        for group in ([s for s in talking if not s.codes], [s for s in talking if s.codes]):
            if group:
                self.frame(group)
        self.steps_taken += 1

    def frame(self, seqs: list[Sequence]) -> None:
        """The next frame of each of these rows: talker, CB0, predictor, then its Frame and audio."""
        rows = self.talk(seqs)
        rows, cb0 = self.choose_cb0(rows)
        rows, predicted = self.predict(rows, cb0)
        self.emit(rows, cb0, predicted)

    # ---- the parts of a step ---------------------------------------------------------------

    def schedule(self) -> None:
        """Stop what was cancelled, ran out of time or stalled; pause slow readers; admit waiting
        requests up to max_batch. Each request's checks run under its own guard."""
        now = time.perf_counter()
        for seq in list(self.scheduler.running) + list(self.scheduler.waiting):
            if seq.codec_error is not None:  # a chunk of its audio failed in the codec process
                self.guard.fail(seq, seq.codec_error)
                continue
            reason = self.guard.run(seq, "talker", [], self.scheduler.stop_reason, seq, now)
            if reason is not None:
                self.finish(seq, reason)
        admitted = self.scheduler.admit(now)
        self.left_line(len(admitted))
        for seq in admitted:
            # Chat admission is the thinker's prompt; speak mode's is the talker's prompt pieces.
            self.guard.run(seq, "thinker" if seq.req.mode == "chat" else "talker", [seq], self.runner.admit, seq)

    def prefill(self, seqs: list[Sequence], stage: str) -> None:
        """The next pieces of these requests' prompts for `stage` ("thinker" or "talker"), one piece of each
        request per call, all of a call's pieces packed into one model call (`Runner.prefill`). While the
        step's budget (`prefill_left`) applies, one such call: the requests in admission order whose pieces
        fit (so the speaking rows wait at most the budget's work a step however long a prompt, and a burst
        of short ones starts together); with no budget, calls until every prompt is read. Each piece is its request's own
        work (a call that raises runs again request by request, and fails only those that fail alone); a
        request whose last piece ran can decode in this same step."""
        while batch := self.next_pieces(seqs, stage):
            batch, out = self.guard.batched(stage, batch, lambda rows: self.runner.prefill(stage, rows))
            for seq, logits in zip(batch, out):
                if logits is not None:  # the thinker's prompt is read: the reply's first token
                    self.guard.run(seq, "thinker", [seq], self.runner.take_token, seq, logits)
            if self.prefill_left is not None:
                return

    def next_pieces(self, seqs: list[Sequence], stage: str) -> list[Sequence]:
        """The requests whose next prompt piece runs in the next prefill call: every one with a piece left, or,
        while the budget applies, those in admission order whose pieces fit what is left of it (spent here)."""
        chosen = []
        for seq in seqs:
            if seq.finished or (todo := _todo(seq, stage)) is None:
                continue
            if self.prefill_left is not None:
                piece = min(self.runner.prefill_chunk, todo.shape[1])
                if piece > self.prefill_left:
                    break
                self.prefill_left -= piece
            chosen.append(seq)
        return chosen

    def think(self, seqs: list[Sequence]) -> None:
        """One reply token for each chat request that needs one: one batched thinker step."""
        seqs, logits = self.guard.batched("thinker", seqs, self.runner.think)
        for seq, row in zip(seqs, logits):
            self.guard.run(seq, "thinker", [seq], self.runner.take_token, seq, row)

    def read_text(self, seqs: list[Sequence]) -> None:
        """Live text (Pipeline.stream_text): what each caller sent since the last step; a row whose talker has
        read all of its text sits this step out, and its wait is counted."""
        now = time.perf_counter()
        for seq in seqs:
            self.guard.run(seq, "talker", [seq], self.model.family.read_text, seq)
            seq.count_text_wait(now)

    def talk(self, seqs: list[Sequence]) -> list[Sequence]:
        """The talker's hidden state for each row's next frame: the prompt's prefill for a request
        starting (as the budget allows), one batched step (ragged cache lengths) for the rest."""
        for seq in self.finish_done([s for s in seqs if s.talker_cache is None]):
            self.guard.run(seq, "talker", [seq], self.runner.start_talker, seq)
        self.prefill([s for s in seqs if s.talker_todo is not None and not s.finished], "talker")
        self.guard.batched("talker", [s for s in seqs if s.talking and s.hidden is None], self.runner.talk)
        return [s for s in seqs if s.talking and not s.finished]

    def choose_cb0(self, seqs: list[Sequence]):
        """CB0 for every row (one codec-head matmul), each with its own settings and generator;
        a row that chose codec EOS ends here."""
        seqs, chosen = self.guard.batched("talker", seqs, self.runner.choose_cb0)
        cb0 = dict(zip(seqs, chosen))
        return self.finish_done(seqs, cb0), cb0

    def predict(self, seqs: list[Sequence], cb0: dict) -> tuple[list[Sequence], dict]:
        """CB1..CB15 for every row, on its predictor (both for compare mode), in one predictor call."""
        rows, made = self.guard.batched("predictor", seqs, lambda r: self.runner.predict(r, cb0))
        return rows, {(s, kind): m for s, kinds in zip(rows, made) for kind, m in kinds.items()}

    def emit(self, seqs: list[Sequence], cb0: dict, predicted: dict) -> None:
        """Each row's Frame; then the audio of the rows whose next chunk is due, one codec call per group
        of equal position and chunk length (newcomers' first audio first); a row at its frame limit
        finishes."""
        for seq in seqs:
            main = "kv" if seq.req.predictor == "kv" else "reprefill"
            other = predicted[seq, "kv"][0] if seq.req.predictor == "compare" else None
            talker_ms, predictor_ms = (1000 * seq.step_spent[k] for k in ("talker", "predictor"))
            self.guard.run(seq, "codec", [], output.add_frame, seq, *cb0[seq], predicted[seq, main], other,
                           talker_ms, predictor_ms, len(seqs), self.model)
            self.runner.frame_made(seq)
        due = [s for s in seqs if not s.finished and output.audio_due(s)]
        codec, firsts = self.runner.codec, any(s.chunks_sent == 0 for s in due)
        if due:  # the codec keeps at most one step behind
            codec.wait_for(self.codec_mark)
        for group in output.codec_groups(due):  # each row is charged the codec's seconds as its audio comes back
            self.guard.batched("codec", group, lambda rows: output.decode(rows, self.model), charge=False)
        if firsts:
            # A first chunk is waited for, as the engine's thread would decode it: its audio is handed over while
            # the engine waits, not after the next compiled call (which holds the GIL): lone tiny, compiled, the
            # first audio came 18 ms later without this.
            codec.wait_for(codec.mark())
        self.finish_done(seqs)

    # ---- ending requests -----------------------------------------------------------------------

    def finish_done(self, seqs: list[Sequence], cb0: dict | None = None) -> list[Sequence]:
        """End the rows the scheduler says are done (`done_reason`, with this frame's CB0 when given);
        → the rows that go on."""
        going = []
        for seq in seqs:
            if seq.finished:
                continue
            chosen = int(cb0[seq][0]) if cb0 is not None else None
            reason = self.scheduler.done_reason(seq, self.model.codec_eos, chosen)
            if reason is None:
                going.append(seq)
            else:
                self.finish(seq, reason)
        return going

    def finish(self, seq: Sequence, reason: str) -> None:
        """The request ends with its result: Done, or the error of its last codec push."""
        self.guard.remove(seq)
        try:
            output.finish(seq, reason, self.model)
        except Exception as exc:  # its last codec push
            output.fail(seq, exc)


def _todo(seq: Sequence, stage: str) -> torch.Tensor | None:
    """The prompt positions `stage` has yet to prefill for this request (None: none)."""
    return seq.thinker_todo if stage == "thinker" else seq.talker_todo
