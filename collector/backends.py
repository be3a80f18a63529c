"""The backends by name: what `--backend` chooses.

`open_backend("auto")` tries NVML, then amdsmi, and otherwise raises
`BackendUnavailable` suggesting `--backend sim`. Each backend is imported
only when chosen (pynvml or amdsmi need not be installed for the others).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpulens.collector.errors import BackendUnavailable, UsageError

if TYPE_CHECKING:  # the command line reads BACKEND_NAMES; ingest needs no backend module
    from gpulens.collector.backend import Backend

BACKEND_NAMES = ("auto", "nvml", "amdsmi", "sim")


def open_backend(name: str, **options: Any) -> Backend:
    """Open the backend called `name` (one of BACKEND_NAMES).

    Options are passed to the sim backend (gpus, profile, seed, ...) and
    ignored by hardware backends.
    """
    if name not in BACKEND_NAMES:
        raise UsageError(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)}")
    if name == "sim":
        from gpulens.collector.sim import SimBackend

        return SimBackend(**options)
    if name == "nvml":
        from gpulens.collector.nvml import NvmlBackend

        return NvmlBackend()
    if name == "amdsmi":
        from gpulens.collector.amd import AmdSmiBackend

        return AmdSmiBackend()

    reasons: list[str] = []
    for candidate in ("nvml", "amdsmi"):
        try:
            return open_backend(candidate)
        except BackendUnavailable as error:
            reasons.append(str(error))
    raise BackendUnavailable(
        "no GPU backend could start (" + "; ".join(reasons) + "); "
        "use --backend sim to run on a simulated node"
    )
