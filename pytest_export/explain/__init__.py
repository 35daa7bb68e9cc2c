"""Failures explained, in the user's terms: ``diagnose`` a failed export (torch's suggested fix, else
``draft_export``); ``cause`` the model's line (and the module) that made a declared dim one size, from draft_export's
record of the guard; ``promise`` whether a suggested fix keeps the declared promise (no constant, no root kept
narrower than written); ``refusal`` why a program refuses an in-range size, the audit rows it marks, and the change
to the model that keeps the promise; ``fixes`` the ``dynamic_shapes`` a failing program really accepts, exported and
probed again before it is offered.

``cause`` imports nothing of the package, ``promise`` only helpers; ``diagnose`` the guard proof (``proof/``) and the
torch side; ``refusal`` and ``fixes`` sit above the probes they rerun (``context``, ``probes``); only the stages
import it. No imports here, so that importing one module of the package runs no other.
"""
