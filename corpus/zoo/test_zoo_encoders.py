"""Zoo: text encoders (BERT family), random weights from their configs; batch and sequence dynamic.

Each case feeds ``input_ids`` and a right-padded ``attention_mask``, as a tokenizer's batch does; the model
returns its ``ModelOutput`` (a registered pytree dataclass), as a deployment exporting it directly gets it.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers", reason="the zoo needs transformers: pip install -e '.[zoo]'")

from zoo_inputs import MAX_SEQ, seeded, text_builder, text_inputs, text_shapes  # noqa: E402

VOCAB = 1000
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=MAX_SEQ, vocab_size=VOCAB)


@pytest.mark.exportable(dynamic_shapes=text_shapes(), input_builder=text_builder(VOCAB),
                        tags=["zoo", "encoder", "zoo-ci", "onnx", "executorch"])
def test_bert():
    seeded()
    model = transformers.BertModel(transformers.BertConfig(**SMALL))
    return model.eval(), (), text_inputs(VOCAB, 2, 16)


# every layer's hidden states as outputs (feature extraction): transformers installs output-capturing hooks and
# sets a flag on the first forward, a lazy initialization the harness keeps
@pytest.mark.exportable(dynamic_shapes=text_shapes(), input_builder=text_builder(VOCAB), tags=["zoo", "encoder"])
def test_bert_hidden_states():
    seeded()
    model = transformers.BertModel(transformers.BertConfig(**SMALL, output_hidden_states=True,
                                                           output_attentions=True, attn_implementation="eager"))
    return model.eval(), (), text_inputs(VOCAB, 2, 16)


# RoBERTa numbers positions from the padding id (pad=1): ids carry it exactly at the masked positions
@pytest.mark.exportable(dynamic_shapes=text_shapes(), input_builder=text_builder(VOCAB, pad=1),
                        tags=["zoo", "encoder"])
def test_roberta():
    seeded()
    config = transformers.RobertaConfig(**{**SMALL, "max_position_embeddings": MAX_SEQ + 2}, pad_token_id=1)
    return transformers.RobertaModel(config).eval(), (), text_inputs(VOCAB, 2, 16, pad=1)


@pytest.mark.exportable(dynamic_shapes=text_shapes(), input_builder=text_builder(VOCAB), tags=["zoo", "encoder"])
def test_distilbert():
    seeded()
    config = transformers.DistilBertConfig(vocab_size=VOCAB, dim=32, n_layers=2, n_heads=2, hidden_dim=64,
                                           max_position_embeddings=MAX_SEQ)
    return transformers.DistilBertModel(config).eval(), (), text_inputs(VOCAB, 2, 16)


@pytest.mark.exportable(dynamic_shapes=text_shapes(), input_builder=text_builder(VOCAB), tags=["zoo", "encoder"])
def test_albert():
    seeded()
    config = transformers.AlbertConfig(**SMALL, embedding_size=16)
    return transformers.AlbertModel(config).eval(), (), text_inputs(VOCAB, 2, 16)


@pytest.mark.exportable(dynamic_shapes=text_shapes(), input_builder=text_builder(VOCAB), tags=["zoo", "encoder"])
def test_electra_sequence_classification():
    seeded()
    config = transformers.ElectraConfig(**SMALL, embedding_size=16, num_labels=3)
    return transformers.ElectraForSequenceClassification(config).eval(), (), text_inputs(VOCAB, 2, 16)


@pytest.mark.exportable(dynamic_shapes=text_shapes(), input_builder=text_builder(VOCAB), tags=["zoo", "encoder"])
def test_deberta_v2():
    seeded()
    config = transformers.DebertaV2Config(**SMALL, relative_attention=True, position_buckets=32,
                                          pos_att_type=["p2c", "c2p"], max_relative_positions=-1)
    return transformers.DebertaV2Model(config).eval(), (), text_inputs(VOCAB, 2, 16)
