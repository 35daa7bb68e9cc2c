"""A module exported in training mode (issue #26): dropout that drops and batch norm that updates its running
statistics pass every stage (eager and the program agree under a fixed seed), and ship a model that behaves
differently from the one evaluated. Named here so the case can warn; ``train=True`` says it is meant.

Imports torch only when called.
"""

from __future__ import annotations

from typing import Any

MAX_NAMED = 5


def active_training(module: Any) -> list[str]:
    """The submodules of ``module`` whose training mode changes what forward computes, each as
    ``"qualified.name (Kind p=0.1)"``: dropout with ``p > 0`` and norms that track running statistics, where
    ``.training`` is set. Empty for a module in eval mode, or anything that is not an ``nn.Module``."""
    import torch

    if not isinstance(module, torch.nn.Module):
        return []
    dropout = torch.nn.modules.dropout._DropoutNd  # Dropout*, AlphaDropout, FeatureAlphaDropout
    norm = torch.nn.modules.batchnorm._NormBase  # BatchNorm*d, SyncBatchNorm, InstanceNorm*d (tracking)
    found: list[str] = []
    for name, sub in module.named_modules():
        if not sub.training:
            continue
        kind = type(sub).__name__
        if isinstance(sub, dropout) and sub.p > 0:
            found.append(f"{name or '<root>'} ({kind} p={sub.p:g})")
        elif isinstance(sub, norm) and sub.track_running_stats:
            found.append(f"{name or '<root>'} ({kind})")
        elif isinstance(sub, torch.nn.MultiheadAttention) and sub.dropout > 0:
            found.append(f"{name or '<root>'} ({kind} dropout={sub.dropout:g})")
    return found


def training_warning(module: Any) -> str | None:
    """The warning for a module exported in training mode, or None where nothing depends on the mode."""
    found = active_training(module)
    if not found:
        return None
    named = ", ".join(found[:MAX_NAMED]) + (f" and {len(found) - MAX_NAMED} more" if len(found) > MAX_NAMED else "")
    return (f"the module is in training mode: {named} behave differently in training (dropout drops at random, "
            "batch norm uses and updates batch statistics), so the exported program is the training one; call "
            ".eval() on the module before returning it, or pass train=True in the marker if training mode is meant")


def note_training(ctx: Any) -> None:
    """The ``eager`` stage's first step: a case whose module is in training mode gets the warning, unless its
    marker says ``train=True``."""
    note = None if ctx.options.train else training_warning(ctx.case.module)
    if note and note not in ctx.result.warnings:
        ctx.result.warnings.append(note)


__all__ = ["active_training", "training_warning", "note_training"]
