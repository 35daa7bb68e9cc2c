"""The guard proof: a program's own shape guards, as torch recorded them, decided over every size of the declared
box (issue #41). ``guardsource`` finds where torch recorded each guard (the model's line, or torch's); ``solver``
decides shape guards over a whole box of sizes, exact where enumerable, else sampled and said so, a one-symbol
guard over any range with ``closed`` (its periodic tail in closed form, a range without a max included: issue #53);
``prove`` maps a program's own guards onto the declared dims and decides them there; ``narrow`` finds the
narrowings of a declaration those guards accept whole.

``closed`` and ``guardsource`` import nothing of the package, ``solver`` only ``closed``, ``narrow`` only
``solver``, ``prove`` only these and ``util``: no torch at import, no case, no pytest. ``audit``, ``explain`` and
the stages read it. No imports here, so that importing ``solver`` runs no other.
"""
