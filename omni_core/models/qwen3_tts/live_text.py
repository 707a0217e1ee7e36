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
    `refresh()` to take in what the caller sent (the engine's thread, between steps).

    The streaming text is a line of entries: T(prefix + ids), then tts_eos once the text ends, then tts_pad.
    The prompt holds the first `held` of them (the text's first token; an ICL clone's transcript and text over
    its codec rows), decode step k entry held + k."""

    def __init__(self, builder: PromptBuilder, feed: "TextFeed", warnings: list[str], prefix: list[int] = (),
                 held: int = 1):
        self.builder, self.feed, self.warnings = builder, feed, warnings
        self.prefix, self.held = list(prefix), held  # an ICL clone's transcript ids; the prompt's entries
        self.text = ""  # all the text received so far
        self.ids: list[int] = []  # its settled ids: what the talker may read
        self.done = False  # the text has ended: every id is settled
        self.rows = builder.project(self.prefix)  # T(prefix + ids) [1, n, H], projected as the ids settle

    @property
    def spoken(self) -> list[int]:
        return self.ids

    @property
    def known(self) -> int:
        """Entries known to be tokens."""
        return len(self.prefix) + len(self.ids)

    @property
    def can_prompt(self) -> bool:
        """The prompt's entries are known (or the text ended: with no text there is nothing to speak)."""
        return self.known >= self.held or self.done

    def ready(self, k: int) -> bool:
        """Whether decode step k's entry is known: a token, or (once the text has ended) tts_eos or tts_pad."""
        return self.done or self.held + k < self.known

    def entry(self, j: int) -> torch.Tensor:
        """Entry j [1, 1, H]."""
        if j < self.known:
            return self.rows[:, j:j + 1]
        assert self.done, f"text entry {j} is not known yet ({self.known} settled)"
        return self.builder.eos if j == self.known else self.builder.pad

    def step(self, k: int) -> torch.Tensor:
        """Decode step k's text [1, 1, H]."""
        return self.entry(self.held + k)

    def prompt_rows(self) -> torch.Tensor:
        """The prompt's entries [1, held, H]."""
        return torch.cat([self.entry(j) for j in range(self.held)], dim=1)

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
        if new:
            self.rows = torch.cat([self.rows, self.builder.project(new)], dim=1)
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
