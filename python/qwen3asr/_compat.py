"""Re-export shims at the module paths of the flat layout (before 0.2), kept for one release."""

from __future__ import annotations

import importlib
import warnings


def moved(namespace: dict, old: str, *new: str) -> None:
    """Warn that module ``old`` moved (to the last of ``new``) and fill ``namespace`` (the shim's
    globals) with the names of the modules ``new``, later ones winning, so ``from old import
    name`` keeps working for every name the old module had."""
    warnings.warn(f"{old} moved to {new[-1]}; import from there ({old} goes away in the next release)",
                  DeprecationWarning, stacklevel=3)
    for name in new:
        module = importlib.import_module(name)
        namespace.update({k: v for k, v in vars(module).items() if not k.startswith("__")})
