"""Choosing and costing probes: forward calls at sizes other than the example's. ``cost`` predicts what a probe costs
and keeps a case's budget, cap and coverage; ``strategies`` draws sizes and builds inputs (real and fake);
``sizing`` builds a probe's inputs and runs them fake or numeric, as its plan says; ``choose`` picks the sizes to
try and judges the program's verdict on them.

``cost`` imports nothing of the package and sits below everything that reads a budget (``declare``, ``results``,
``context``); the others import the case context (``context``, ``audit``, ``observe``) and are imported by the
stages, ``explain.fixes``, ``runtimes`` and ``repro``. No imports here, so that importing ``cost`` runs no other.
"""
