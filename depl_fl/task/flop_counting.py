"""torch's ``FlopCounterMode`` without the import of ``torch._dynamo`` it makes on first use.

torch wraps every ``TorchDispatchMode``'s ``__torch_dispatch__`` so that
``torch.compile`` skips it; the wrapper imports ``torch._dynamo`` (and sympy)
the first time it runs, about 70 MB of resident memory a server that only
counts the FLOPs of a variant never needs (nothing here is compiled). The
counter below is torch's own, counting by the same rules, with its dispatch
left unwrapped. On a torch whose internals differ it is torch's counter as
is: the same counts, with the compiler's import.
"""

from __future__ import annotations

from torch.utils.flop_counter import FlopCounterMode

try:
    from torch.utils.flop_counter import _FlopCounterMode

    _UNWRAPPED_DISPATCH = _FlopCounterMode.__torch_dispatch__.__wrapped__
except (ImportError, AttributeError):  # another torch release: fall back to its public counter
    _FlopCounterMode = None


if _FlopCounterMode is None:
    FlopCounter = FlopCounterMode
else:
    class _UncompiledDispatch(_FlopCounterMode):
        """torch's counting dispatch, not wrapped for ``torch.compile`` (never compiled here)."""

        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        # the undecorated function: the inherited one imports torch._dynamo when first called
        __torch_dispatch__ = _UNWRAPPED_DISPATCH

    class FlopCounter(FlopCounterMode):  # type: ignore[no-redef]
        """``FlopCounterMode`` whose counting never imports ``torch._dynamo``; same counts, same arguments."""

        def __enter__(self) -> FlopCounter:
            self.flop_counts.clear()
            self.mod_tracker.__enter__()
            self.mode = _UncompiledDispatch(self)
            self.mode.__enter__()
            return self
