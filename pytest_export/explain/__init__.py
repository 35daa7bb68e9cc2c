"""Failures explained, in the user's terms: ``frames`` finds the model's own lines in a failure (and the pytree
registration a class of the user's needs); ``guardsource`` where torch recorded each guard; ``diagnose`` a failed
export (torch's suggested fix, else ``draft_export``); ``cause`` the model's line (and the module) that made a declared
dim one size, from draft_export's record of the guard; ``promise`` whether a suggested fix keeps the declared
promise (no constant, no root kept narrower than written); ``refusal`` why a program refuses an in-range size, and the
change to the model that keeps the promise; ``fixes`` the ``dynamic_shapes`` a failing program really accepts,
exported and probed again before it is offered.

``frames``, ``guardsource`` and ``cause`` import nothing of the package, ``promise`` only helpers; ``diagnose`` and ``refusal`` only helpers below them;
``fixes`` sits above the probes it reruns (``context``, ``probes``) and only the ``guards`` stage imports it. No
imports here, so that importing one module of the package runs no other.
"""
