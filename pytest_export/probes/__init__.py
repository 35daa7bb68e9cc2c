"""Choosing what runs: the probes of a case, forward calls at sizes other than the example's. ``strategies`` draws
sizes and builds inputs (real and fake); ``sized`` holds a probe's inputs and the verdicts' vocabulary; ``sizing``
plans each probe from the cost model (``memory/``: charging the budget in the order the probes are planned, the
edges first) and runs it fake or numeric, as its plan says; ``choose`` picks the sizes to try, in tiers, and judges
the program's verdict on them.

It sits above the case context (``context``, ``audit``, ``torchside.observe``) and the cost model, for the stages,
``explain``, ``runtimes`` and ``repro``. No imports here, so that importing one module of the package runs no other.
"""
