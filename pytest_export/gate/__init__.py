"""The gate: what a run's results mean for CI. ``scope`` records what a run covered; ``verdicts`` says each case's
verdict one way everywhere; ``signature`` says what makes two failures the same; ``baseline`` reads and writes the
file of known failures; ``judge`` turns a result into its test's action and a whole run into the baseline's verdict,
in the run and in ``python -m pytest_export gate``.

Plain Python over results and the report's case dicts: it imports ``util``, ``declare.options`` and ``results``,
nothing that runs a case (no torch, no pytest). No imports here, so that importing one module of the package runs
no other.
"""
