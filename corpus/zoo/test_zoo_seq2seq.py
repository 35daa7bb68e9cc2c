"""Zoo: encoder-decoder models, random weights from their configs; batch, source and target length dynamic.

A deployment exports the teacher-forced forward (no cache): source ids and mask, target ids, logits out.
"""

from __future__ import annotations

import pytest
from torch.export import Dim

transformers = pytest.importorskip("transformers", reason="the zoo needs transformers: pip install -e '.[zoo]'")

from zoo_inputs import BATCH, MAX_SEQ, SEQ, seeded, text_inputs, token_ids  # noqa: E402

VOCAB = 1000
TGT = Dim("tgt", min=1, max=MAX_SEQ)
SHAPES = {"input_ids": {0: BATCH, 1: SEQ}, "attention_mask": {0: BATCH, 1: SEQ},
          "decoder_input_ids": {0: BATCH, 1: TGT}, "use_cache": None}


def _inputs(batch: int, seq: int, tgt: int) -> dict:
    return {**text_inputs(VOCAB, batch, seq), "decoder_input_ids": token_ids(VOCAB, batch, tgt), "use_cache": False}


def _builder(sizes, args, kwargs):
    return (), _inputs(sizes["batch"], sizes["seq"], sizes["tgt"])


@pytest.mark.exportable(dynamic_shapes=SHAPES, input_builder=_builder, tags=["zoo", "encoder-decoder"])
def test_t5():
    seeded()
    config = transformers.T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                                   num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=32,
                                   use_cache=False)
    return transformers.T5ForConditionalGeneration(config).eval(), (), _inputs(2, 16, 8)


@pytest.mark.exportable(dynamic_shapes=SHAPES, input_builder=_builder,
                        tags=["zoo", "encoder-decoder", "zoo-ci", "onnx", "executorch"])
def test_bart():
    seeded()
    config = transformers.BartConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                     encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                     decoder_ffn_dim=64, max_position_embeddings=MAX_SEQ, use_cache=False)
    return transformers.BartForConditionalGeneration(config).eval(), (), _inputs(2, 16, 8)


@pytest.mark.exportable(dynamic_shapes=SHAPES, input_builder=_builder, tags=["zoo", "encoder-decoder"])
def test_marian():
    seeded()
    config = transformers.MarianConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
                                       decoder_ffn_dim=64, max_position_embeddings=MAX_SEQ, pad_token_id=0,
                                       decoder_start_token_id=0, use_cache=False)
    return transformers.MarianMTModel(config).eval(), (), _inputs(2, 16, 8)
