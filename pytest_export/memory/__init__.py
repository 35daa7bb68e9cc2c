"""The cost and memory model: what a probe (a forward call at sizes other than the example's) costs in time and
memory, predicted without running it, and the case's budget and memory cap it is held to. ``count`` counts what a
forward makes under fake tensors (FLOPs, bytes, operators); ``kernels`` what a fused kernel costs beyond the tensors
it returns; ``opaque`` the ops that count cannot see into (custom ops, kernels outside ``aten``), what they hold
inside, and the memory guard numeric probes of their cases run under; ``cost`` predicts a probe's time and memory
from its count and keeps a case's budget, cap and coverage (its rows and lines in ``coverage``); ``calibration`` is
one case's costing (its fake mode, its costs calibrated on the example).

``kernels``, ``opaque`` and ``coverage`` import nothing of the package, ``count`` only the first two, ``cost`` only
``count``, ``opaque`` and ``coverage``; ``calibration`` these, ``torchside.torchlog`` and helpers. It sits below
everything that reads a budget (``results``, ``report``) and below ``context``, which holds one ``calibration`` per
case. No imports here, so that importing ``cost`` runs no other.
"""
