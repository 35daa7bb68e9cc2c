"""Zoo: decoder-only language models, random weights from their configs; batch and sequence dynamic.

A deployment exports the prefill forward: ``input_ids`` and a right-padded ``attention_mask`` in, logits out,
``use_cache=False`` (no KV cache object in the program's inputs or outputs).
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers", reason="the zoo needs transformers: pip install -e '.[zoo]'")

from zoo_inputs import MAX_SEQ, seeded, text_builder, text_inputs, text_shapes  # noqa: E402

VOCAB = 1000
LLAMA_LIKE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_SEQ, use_cache=False)


def _lm(model):
    return model.eval(), (), {**text_inputs(VOCAB, 2, 16), "use_cache": False}


def _builder(sizes, args, kwargs):
    _, inputs = text_builder(VOCAB)(sizes, args, kwargs)
    return (), {**inputs, "use_cache": False}


# what every decoder case declares: batch and sequence dynamic, `use_cache` a plain flag
LM = dict(dynamic_shapes={**text_shapes(), "use_cache": None}, input_builder=_builder)


@pytest.mark.exportable(
    **LM, tags=["zoo", "decoder", "onnx", "executorch"],
    xfail={"decomp": "SDPA's fake kernel reports a (B, S, H, D)-strided output, so export drops the .contiguous() "
                     "after it; run_decompositions() lowers SDPA to (B, H, S, D) and Conv1D's x.view(-1, E) raises",
           "executorch": "the same x.view(-1, E) raises in ExecuTorch's lowering (its decompositions)"},
)
def test_gpt2():
    seeded()
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=MAX_SEQ,
                                     bos_token_id=0, eos_token_id=0, use_cache=False)
    return _lm(transformers.GPT2LMHeadModel(config))


@pytest.mark.exportable(**LM, tags=["zoo", "decoder", "zoo-ci", "onnx", "executorch"])
def test_llama():
    seeded()
    return _lm(transformers.LlamaForCausalLM(transformers.LlamaConfig(**LLAMA_LIKE)))


# sliding window (16) shorter than the longest declared sequence: the mask differs past it
@pytest.mark.exportable(**LM, tags=["zoo", "decoder"])
def test_mistral_sliding_window():
    seeded()
    return _lm(transformers.MistralForCausalLM(transformers.MistralConfig(**LLAMA_LIKE, sliding_window=16)))


@pytest.mark.exportable(**LM, tags=["zoo", "decoder"])
def test_qwen2():
    seeded()
    return _lm(transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**LLAMA_LIKE)))


@pytest.mark.exportable(**LM, tags=["zoo", "decoder"])
def test_gemma():
    seeded()
    return _lm(transformers.GemmaForCausalLM(transformers.GemmaConfig(**LLAMA_LIKE, head_dim=8)))


@pytest.mark.exportable(**LM, tags=["zoo", "decoder"])
def test_phi():
    seeded()
    config = transformers.PhiConfig(**LLAMA_LIKE, partial_rotary_factor=0.5)
    return _lm(transformers.PhiForCausalLM(config))


# OPT numbers positions from the attention mask (cumsum), so padding changes positions
@pytest.mark.exportable(**LM, tags=["zoo", "decoder"])
def test_opt():
    seeded()
    config = transformers.OPTConfig(vocab_size=VOCAB, hidden_size=32, ffn_dim=64, num_hidden_layers=2,
                                    num_attention_heads=2, max_position_embeddings=MAX_SEQ, word_embed_proj_dim=32,
                                    use_cache=False)
    return _lm(transformers.OPTForCausalLM(config))


@pytest.mark.exportable(**LM, tags=["zoo", "decoder"])
def test_gpt_neox():
    seeded()
    config = transformers.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=MAX_SEQ,
                                        rotary_pct=0.5, use_cache=False)
    return _lm(transformers.GPTNeoXForCausalLM(config))
