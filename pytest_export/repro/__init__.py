"""The repro script of a failing case (``--export-repro``): ``write`` decides what goes in and writes the script
with its ``.pt`` file; ``script`` assembles the text and holds the helpers the script calls; ``checks`` holds the
check it runs, one per stage it can reproduce; ``source`` renders the Python it writes (the ``dynamic_shapes``
declaration, the model's classes).

``script`` and ``checks`` import nothing; ``source`` imports ``script``; ``write`` imports them and what runs a case
(``context``, ``torchside.observe``, the probes). Only ``api`` imports ``write``. No imports here, so that importing
one module of the package runs no other.
"""
