"""Choosing and costing probes: forward calls at sizes other than the example's. ``cost`` predicts what a probe costs
and keeps a case's budget, cap and coverage (its rows and lines in ``coverage``); ``kernels`` what a fused kernel
costs beyond the tensors it returns; ``opaque`` the ops that count cannot see into (custom ops, kernels outside
``aten``), what they hold inside, and the memory guard numeric probes of their cases run under;
``calibration`` is one case's costing (its fake mode, its costs calibrated on the example); ``strategies`` draws
sizes and builds inputs (real and fake); ``sizing`` builds a probe's inputs and runs them fake or numeric, as its
plan says; ``choose`` picks the sizes to try and judges the program's verdict on them. ``solver`` decides shape
guards over a whole box of sizes; ``proof`` maps a program's own guards onto the declared dims and decides them
there (issue #41); ``narrow`` finds the narrowings of a declaration those guards accept whole.

``kernels``, ``opaque``, ``coverage`` and ``solver`` import nothing of the package, and ``cost`` only the first
three; ``proof`` only ``solver`` and ``explain.guardsource``, ``narrow`` only ``solver``: it sits below everything
that reads a budget (``declare``, ``results``, ``report``); ``calibration`` sits below ``context``, which holds one per case;
``strategies``, ``sizing`` and ``choose`` sit above the case context (``context``, ``audit``, ``observe``), for the
stages, ``explain.fixes``, ``runtimes`` and ``repro``. No imports here, so that importing ``cost`` runs no other.
"""
