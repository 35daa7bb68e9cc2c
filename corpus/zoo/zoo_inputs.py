"""Shared pieces of the zoo: the dims a deployment declares and input builders that keep inputs meaningful.

Token ids stay inside the vocabulary (and off the padding id where the model derives positions from it);
attention masks are right-padded like a tokenizer's batch, every row keeping at least one real token.
"""

from __future__ import annotations

import torch
from torch.export import Dim

# as deployments ship them: batches of 64, sequences to the configs' max_position_embeddings (2,048 here)
MAX_BATCH = 64
MAX_SEQ = 2048

BATCH = Dim("batch", min=1, max=MAX_BATCH)
SEQ = Dim("seq", min=1, max=MAX_SEQ)


def padded_mask(batch: int, seq: int) -> torch.Tensor:
    """A 0/1 ``long`` mask, right-padded: row ``i`` keeps a random length in ``[1, seq]`` (the first row ``seq``)."""
    lengths = torch.randint(1, seq + 1, (batch,))
    lengths[0] = seq
    return (torch.arange(seq)[None, :] < lengths[:, None]).long()


def token_ids(vocab: int, batch: int, seq: int, mask: torch.Tensor | None = None,
              pad: int | None = None) -> torch.Tensor:
    """Ids in ``[0, vocab)``; with ``pad``: never ``pad`` at real positions, ``pad`` at the masked ones."""
    ids = torch.randint(0, vocab, (batch, seq))
    if pad is not None:
        ids = torch.where(ids == pad, (pad + 1) % vocab, ids)
        if mask is not None:
            ids = torch.where(mask.bool(), ids, torch.full_like(ids, pad))
    return ids


def text_inputs(vocab: int, batch: int, seq: int, pad: int | None = None) -> dict[str, torch.Tensor]:
    mask = padded_mask(batch, seq)
    return {"input_ids": token_ids(vocab, batch, seq, mask, pad), "attention_mask": mask}


def text_builder(vocab: int, pad: int | None = None):
    """``input_builder`` for ``input_ids`` and ``attention_mask`` keyword inputs with dims ``batch`` and ``seq``."""

    def build(sizes, args, kwargs):
        return (), text_inputs(vocab, sizes["batch"], sizes["seq"], pad)

    return build


def text_shapes(seq=SEQ) -> dict:
    return {"input_ids": {0: BATCH, 1: seq}, "attention_mask": {0: BATCH, 1: seq}}


def lm_inputs(vocab: int, batch: int, seq: int) -> dict:
    """A decoder's prefill inputs: ``text_inputs`` and ``use_cache=False`` (no KV cache in or out of the program)."""
    return {**text_inputs(vocab, batch, seq), "use_cache": False}


def lm_builder(vocab: int):
    """``input_builder`` for ``lm_inputs``: dims ``batch`` and ``seq``, ``use_cache`` kept ``False``."""

    def build(sizes, args, kwargs):
        return (), lm_inputs(vocab, sizes["batch"], sizes["seq"])

    return build


def lm_shapes(seq=SEQ) -> dict:
    """``text_shapes`` for a decoder: ``use_cache`` a plain flag."""
    return {**text_shapes(seq), "use_cache": None}


def seeded():
    torch.manual_seed(0)
