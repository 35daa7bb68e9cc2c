"""Zoo: image models, random weights from their configs.

Batch is dynamic everywhere, to 64. Image size is dynamic, to 1,024 px as vision deployments ship, where the
architecture takes any size: convolutional backbones (global pooling at the end), DINOv2 (interpolates its
position embeddings), SegFormer, and Swin in multiples of its patch size times its window size (2 * 4 = 8 here;
one stage, no patch merging: with two stages, export alone takes 50 s on 2 cores). ViT and DeiT learn one position embedding per patch of a fixed
image size: a deployment declares that size static.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

transformers = pytest.importorskip("transformers", reason="the zoo needs transformers: pip install -e '.[zoo]'")

from zoo_inputs import BATCH, seeded  # noqa: E402

LABELS = 10
VIT = dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
           intermediate_size=64, num_labels=LABELS)
# image sides to 1,024 px, as vision deployments ship them
H, W = Dim("height", min=32, max=1024), Dim("width", min=32, max=1024)
BATCH_ONLY = {"pixel_values": {0: BATCH}}
ANY_SIZE = {"pixel_values": {0: BATCH, 2: H, 3: W}}
# a stride-32 backbone declared for 64 to 1,024 px: its last feature map is at least 2x2 (see test_convnext)
H64, W64 = Dim("height", min=64, max=1024), Dim("width", min=64, max=1024)
SWIN_KH, SWIN_KW = Dim("kh", min=4, max=128), Dim("kw", min=4, max=128)  # 32 to 1,024 px in steps of 8


def _image(model, size: int = 32, batch: int = 2):
    return model.eval(), (), {"pixel_values": torch.randn(batch, 3, size, size)}


@pytest.mark.exportable(dynamic_shapes=BATCH_ONLY, tags=["zoo", "vision", "zoo-ci", "onnx", "executorch"])
def test_vit():
    seeded()
    return _image(transformers.ViTForImageClassification(transformers.ViTConfig(**VIT)))


@pytest.mark.exportable(dynamic_shapes=BATCH_ONLY, tags=["zoo", "vision"])
def test_deit_with_teacher():
    seeded()
    return _image(transformers.DeiTForImageClassificationWithTeacher(transformers.DeiTConfig(**VIT)))


@pytest.mark.exportable(
    dynamic_shapes=ANY_SIZE, tags=["zoo", "vision"],
    xfail={stage: "torch.export resolves the size branch `num_patches == num_positions` of interpolate_pos_encoding "
                  "(its escape is torch.jit.is_tracing() only) at trace time: guard (h//8)*(w//8) != 16 refuses 32-39px"
           for stage in ("guards", "fuzz")},
)
def test_dinov2():
    seeded()
    config = transformers.Dinov2Config(**{**VIT, "image_size": 32})
    return _image(transformers.Dinov2ForImageClassification(config), size=48)


@pytest.mark.exportable(
    dynamic_shapes={"pixel_values": {0: BATCH, 2: 8 * SWIN_KH, 3: 8 * SWIN_KW}}, tags=["zoo", "vision"],
    xfail={stage: "torch.export: window_reverse's view(-1, h//w, ...) re-derives the batch as an expression it assumes "
                  "!= 1: ep.module() refuses batch=1 at every image size, though range_constraints keeps [1, 8]"
           for stage in ("guards", "fuzz")},
)
def test_swin():
    seeded()
    config = transformers.SwinConfig(image_size=32, patch_size=2, embed_dim=16, depths=[1], num_heads=[2],
                                     window_size=4, num_labels=LABELS)
    return _image(transformers.SwinForImageClassification(config), size=48)


@pytest.mark.exportable(dynamic_shapes={"pixel_values": {0: BATCH, 2: H64, 3: W64}},
                        tags=["zoo", "vision", "zoo-ci", "onnx", "executorch"],
                        xfail={"executorch": "ExecuTorch's memory plan bounds a tensor at 15 batches (960 elements), "
                                             "below the batch it was lowered for: batch 16 at 96 px is refused, with "
                                             "XNNPACK and with the portable kernels"})
def test_resnet():
    seeded()
    config = transformers.ResNetConfig(embedding_size=16, hidden_sizes=[16, 32, 32, 64], depths=[1, 1, 1, 1],
                                       layer_type="bottleneck", num_labels=LABELS)
    return _image(transformers.ResNetForImageClassification(config), size=96)


# declared down to 32 px, where the last feature map is 1x1 (the model takes it: global pooling)
@pytest.mark.exportable(
    dynamic_shapes=ANY_SIZE, tags=["zoo", "vision"],
    xfail={"export": "torch.export's 0/1 specialization: a range where the last feature map (h//32) is 1 at 32-63 px "
                     "and >= 2 above cannot be one program (UserError: Constraints violated; [64, 96] exports)"},
)
def test_convnext():
    seeded()
    config = transformers.ConvNextConfig(hidden_sizes=[16, 32, 32, 64], depths=[1, 1, 1, 1], num_labels=LABELS)
    return _image(transformers.ConvNextForImageClassification(config), size=64)


@pytest.mark.exportable(
    dynamic_shapes=ANY_SIZE, tags=["zoo", "vision"],
    xfail={"export": "transformers' TF-style SAME padding (apply_tf_padding, tf_padding=True as in the released "
                     "checkpoints) calls int(features.shape[-2]): export specializes height and width (UserError)"},
)
def test_mobilenet_v2():
    seeded()
    config = transformers.MobileNetV2Config(image_size=32, depth_multiplier=0.25, num_labels=LABELS)
    return _image(transformers.MobileNetV2ForImageClassification(config), size=48)


@pytest.mark.exportable(dynamic_shapes=ANY_SIZE, tags=["zoo", "vision"])
def test_segformer():
    seeded()
    config = transformers.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
                                          num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=LABELS)
    return _image(transformers.SegformerForSemanticSegmentation(config), size=48)
