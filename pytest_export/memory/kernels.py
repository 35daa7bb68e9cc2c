"""What a fused kernel costs beyond the tensors it returns, where a count of those tensors cannot see it: the
FLOPs of attention kernels ``FlopCounterMode`` has no formula for, the attention scores the native multi-head
attention fast path (``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` in eval under
``torch.no_grad()``) makes and frees inside itself, and a CPU convolution's second copy of its output. ``cost``'s
tally adds them.

torch is imported lazily; nothing here imports the package.
"""

from __future__ import annotations

from typing import Any

# the fused kernels that hold batch x heads x L x S scores inside, and where their head count is in their arguments
_SCORES_HEADS = {"_native_multi_head_attention": 4, "_transformer_encoder_layer_fwd": 2}
# the convolutions that write their output twice (``hidden_bytes``)
_CONVOLUTIONS = frozenset({"convolution", "_convolution", "mkldnn_convolution", "convolution_overrideable"})


def attention_flops(args: Any) -> float:
    """FLOPs of an attention kernel from its query, key and value shapes (..., L, E): two matmuls over L x S."""
    import torch

    q, k, v = (list(args) + [None, None, None])[:3]
    if not all(isinstance(t, torch.Tensor) and t.dim() >= 2 for t in (q, k, v)):
        return 0.0
    batch = q.numel() // (q.shape[-2] * q.shape[-1]) if q.shape[-2] * q.shape[-1] else 0
    return 2.0 * batch * q.shape[-2] * k.shape[-2] * (q.shape[-1] + v.shape[-1])


def hidden_bytes(name: str, args: Any, out: Any) -> int:
    """The most bytes the kernel ``name`` (an op's overload packet name) holds at once while it runs, at these
    arguments, where that is more than it returns (0 for any other op). A convolution on the CPU (oneDNN) writes
    its output in a layout of its own and reorders it into the tensor it returns: twice its output while it runs
    (3x3 convolutions at batch 64 of 96 px grew the process by twice their outputs, measured, from 19 to 151 MB;
    counted by their outputs alone, a stack of them took 1.36x its prediction; issue #43). The attention scores of the
    native multi-head attention fast path: under ``torch.no_grad()`` ``nn.MultiheadAttention`` takes it, and at
    batch 8 and 4,096 tokens it grew the process by 1.09 GB while the tensors it returned were 4 MB (issue #31)."""
    import torch

    if name in _CONVOLUTIONS:
        return 2 * out.numel() * out.element_size() if isinstance(out, torch.Tensor) else 0
    at = _SCORES_HEADS.get(name)
    if at is None or len(args) <= at or not isinstance(args[0], torch.Tensor) or args[0].dim() < 2:
        return 0
    q = args[0]
    k = args[1] if name == "_native_multi_head_attention" and isinstance(args[1], torch.Tensor) else q
    rows = q.numel() // q.shape[-1] if q.shape[-1] else 0  # batch x L
    return int(rows * int(args[at]) * k.shape[-2] * q.element_size())


__all__ = ["attention_flops", "hidden_bytes"]
