"""What a run reports: ``files`` writes (and reads back) every file the tool writes: the JSON report, its case
lines, the coverage op table, the Markdown summary and the baseline; ``summary`` renders the terminal summary and
the Markdown; ``schema`` is every field the commands read from a report, checked once where one is read;
``conformance`` the table of cases by tag and stage, and the deployment matrix; ``progress`` shows the
stage a running case is in, on the terminal; ``run`` is the controller's report of a pytest run (its case lines,
and at its end the whole run's gate, the files and the terminal summary).

Plain Python over the report's case dicts (no torch; no pytest but in ``run``): it imports the gate, the options,
``memory.cost`` for its coverage lines, and helpers; ``session`` and ``__main__`` import it. No imports here, so
that importing one module of the package runs no other.
"""
