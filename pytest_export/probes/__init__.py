"""Choosing and costing probes: forward calls at sizes other than the example's. ``count`` counts what a forward
makes under fake tensors (FLOPs, bytes, operators); ``cost`` predicts what a probe costs from that count and keeps
a case's budget, cap and coverage (its rows and lines in ``coverage``); ``kernels`` what a fused kernel
costs beyond the tensors it returns; ``opaque`` the ops that count cannot see into (custom ops, kernels outside
``aten``), what they hold inside, and the memory guard numeric probes of their cases run under;
``calibration`` is one case's costing (its fake mode, its costs calibrated on the example); ``strategies`` draws
sizes and builds inputs (real and fake); ``sized`` holds a probe's inputs and the verdicts' vocabulary; ``sizing``
plans each probe (charging the budget in the order the probes are planned: the edges first) and runs it fake or
numeric, as its plan says; ``choose`` picks the sizes to try, in tiers, and judges the program's verdict on them.
The guard proof is ``proof/``.

``kernels``, ``opaque`` and ``coverage`` import nothing of the package, ``count`` only the first two,
and ``cost`` only ``count``, ``opaque`` and ``coverage``: it sits below everything
that reads a budget (``declare``, ``results``, ``report``); ``calibration`` sits below ``context``, which holds one per case;
``strategies``, ``sized``, ``sizing`` and ``choose`` sit above the case context (``context``, ``audit``, ``observe``), for the
stages, ``explain.fixes``, ``runtimes`` and ``repro``. No imports here, so that importing ``cost`` runs no other.
"""
