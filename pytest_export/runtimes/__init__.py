"""The deployment runtimes: what the ``onnx`` and ``executorch`` stages share to run a program outside torch and
hold it to eager. ``checks`` checks a runtime against eager (the example, then the sizes ``guards`` and ``fuzz``
ran with real tensors, then the sizes the program refused); ``memory`` predicts what a runtime allocates (the
ExecuTorch memory plan, every dynamic dim at its upper bound) and chooses the bounds that fit the memory cap;
``lowering`` reads ExecuTorch's lowering for findings (what the partitioners took and left, missing kernels, the
program planned within bounds); ``forked`` runs work whose memory must go back in a forked child held to the cap.

It sits above the probes (``checks`` reuses their sizes) and below the stages, the only modules that import it;
torch and ``executorch`` are imported where they are used. No imports here, so that importing one module of the
package runs no other.
"""
