"""`LiveText`: the talker's text steps while the text is still being written (`Pipeline.stream_text`).

In streaming text input the talker reads the text's first token in its prompt, then one token a frame
beside the codes, then tts_eos, then tts_pad (prompt.py). The package knows the whole text before the
first frame; here it arrives in pieces, and the talker reads a token only once later text cannot
change it. A tokenizer cuts text into pre-tokens (Qwen's: a word with its leading space, a digit, a
run of punctuation or spaces) and merges within each, so every token before the last pre-token is
settled: the next piece may only extend that last word (or join it). When the talker has read every
settled token it waits (its row sits out the engine's steps) until more text or the end comes. The
end settles the rest. So a request whose text came in pieces reads the tokens, and makes the codes, of
the same text given whole in streaming text input, bit for bit (each token's projection is a row of a
batch-invariant matmul, projected as it settles; tests/test_live_text.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from omni_core.models.qwen3_tts.prompt import PromptBuilder

if TYPE_CHECKING:
    from omni_core.engine.text_feed import TextFeed


class LiveText:
    """Speaks the engine's text-steps interface (done, ids, spoken, can_prompt, ready(k), step(k)), with
    `refresh()` to take in what the caller sent (the engine's thread, between steps)."""

    def __init__(self, builder: PromptBuilder, feed: "TextFeed", warnings: list[str]):
        self.builder, self.feed, self.warnings = builder, feed, warnings
        self.text = ""  # all the text received so far
        self.ids: list[int] = []  # its settled ids: what the talker may read
        self.done = False  # the text has ended: every id is settled
        self.rows = builder.pad[:, :0]  # T(ids[1:]) [1, len(ids) - 1, H]: the decode steps' text, as it settles

    @property
    def spoken(self) -> list[int]:
        return self.ids

    @property
    def can_prompt(self) -> bool:
        """The prompt holds the first token (or the text ended with none, and there is nothing to speak)."""
        return bool(self.ids) or self.done

    def ready(self, k: int) -> bool:
        """Whether decode step k's text is known: token k + 1, or the end."""
        return self.done or k + 1 < len(self.ids)

    def step(self, k: int) -> torch.Tensor:
        """Decode step k's text [1, 1, H]: T(token k + 1), then tts_eos, then tts_pad."""
        assert self.ready(k), f"text step {k} is not known yet ({len(self.ids)} settled tokens)"
        if k + 1 < len(self.ids):
            return self.rows[:, k:k + 1]
        return self.builder.eos if k + 1 == len(self.ids) else self.builder.pad

    def refresh(self) -> list[int]:
        """Take in the text sent since the last look → the ids it settled (their rows projected)."""
        piece, ended, warnings = self.feed.take()
        self.warnings.extend(warnings)
        if not piece and ended == self.done:
            return []
        self.text, self.done = self.text + piece, ended
        ids = settled(self.builder, self.text, ended)
        if ids[:len(self.ids)] != self.ids:  # a tokenizer whose earlier tokens moved (it normalises across pieces)
            self.warnings.append("the text's earlier tokens changed as it grew; the talker kept what it had read")
        new = ids[len(self.ids):]
        first = 0 if self.ids else 1  # the first token goes into the prompt, not a decode step
        if new[first:]:
            self.rows = torch.cat([self.rows, self.builder.project(new[first:])], dim=1)
        self.ids = self.ids + new
        return new


def settled(builder: PromptBuilder, text: str, ended: bool) -> list[int]:
    """The ids of `text` that later text cannot change: all once it has ended, else those before its last
    pre-token (kept only where they agree with the whole text's)."""
    ids = builder.text_ids(text)
    if ended:
        return ids
    start = last_pretoken_start(builder.tokenizer, text)
    head = builder.text_ids(text[:start]) if start > 0 else []
    n = next((i for i, (a, b) in enumerate(zip(head, ids)) if a != b), min(len(head), len(ids)))
    return ids[:n]


def last_pretoken_start(tokenizer, text: str) -> int:
    """Where the last pre-token of `text` starts (the tokenizer's own cut; without one, the last run of
    spaces), 0 for one pre-token."""
    pre = getattr(getattr(tokenizer, "backend_tokenizer", None), "pre_tokenizer", None)
    if pre is not None:
        pieces = pre.pre_tokenize_str(text)
        return pieces[-1][1][0] if pieces else 0
    stripped = text.rstrip()
    cut = max(stripped.rfind(" "), stripped.rfind("\n"), stripped.rfind("\t"))
    return max(cut, 0)
