"""What a run reports: ``files`` writes (and reads back) every file the tool writes: the JSON report, its case
lines, the coverage op table, the Markdown summary and the baseline; ``summary`` renders the terminal summary and
the Markdown; ``conformance`` the table of cases by tag and stage, and the deployment matrix; ``progress`` shows the
stage a running case is in, on the terminal.

Plain Python over the report's case dicts (no torch, no pytest): it imports the gate's verdicts and scope, the
options, ``probes.cost`` for its coverage lines, and helpers; ``session`` and ``__main__`` import it. No imports
here, so that importing one module of the package runs no other.
"""
