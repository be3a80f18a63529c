"""gpulens' optional compiled modules (the Kineto and nvidia-smi scanners),
loaded one way.

Each is built by setuptools where a C compiler is found and has a
pure-Python path beside it. It is used only when it was built from these
sources (its `VERSION` equals the loader's: an editable install after a
pull may hold an older build, which is warned of and not used), and
`GPULENS_PURE_PYTHON=1` turns every one off (to compare, or to rule one
out).
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

PURE_PYTHON_VARIABLE = "GPULENS_PURE_PYTHON"


def load_compiled(module: str, version: int, what: str) -> tuple[ModuleType | None, bool]:
    """(the compiled `module`, False) where it is built from these sources;
    (None, True) where it is not built; (None, False) where it is turned
    off or out of date (`what` names it in the warning)."""
    if os.environ.get(PURE_PYTHON_VARIABLE, "") not in ("", "0"):
        return None, False
    try:
        # By name: an optional module, which a build without a C compiler lacks.
        compiled = importlib.import_module(module)
    except ImportError:
        return None, True
    if getattr(compiled, "VERSION", None) != version:
        warnings.warn(f"gpulens: the compiled {what} is out of date and not used; `pip install -e .` rebuilds it",
                      RuntimeWarning, stacklevel=3)
        return None, False
    return compiled, False
