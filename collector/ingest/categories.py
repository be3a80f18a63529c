"""The one rule that puts a GPU activity in a category.

- communication: NCCL/RCCL kernels under every name they have had
  (`ncclKernel_*` before NCCL 2.19, `ncclDevKernel_*` after, the symmetric
  `ncclSymkDevKernel_*` of NCCL 2.27+, RCCL's `ncclDevKernel_Generic*`),
  MSCCL/MSCCL++ kernels, and any kernel that carries collective arguments;
- memory: memcpy and memset activities (and their kernel-named forms),
  and the kernels the ROCm runtime (ROCclr) runs to do a hipMemset* or a
  device-to-device hipMemcpy*: `__amd_rocclr_fillBuffer*`,
  `__amd_rocclr_copyBuffer*` and their image forms (traces may add
  `.kd`). They are kernel activities that only fill or copy memory;
- compute: everything else.

The rule is tested against every kernel name in `../shared/traces`.
"""

from __future__ import annotations

import re

COMPUTE = "compute"
COMMUNICATION = "communication"
MEMORY = "memory"
CATEGORIES = (COMPUTE, COMMUNICATION, MEMORY)

_COMMUNICATION_NAME = re.compile(
    r"^(?:void\s+)?(?:"
    r"nccl(?:Symk)?(?:Dev)?Kernel"  # ncclKernel_, ncclDevKernel_, ncclSymkDevKernel_
    r"|rccl\w*Kernel"  # rcclKernel..., rcclGenericKernel
    r"|mscclKernel"
    r"|mscclpp\w*"
    r"|ncclKernel"
    r")",
    re.IGNORECASE,
)
_MEMORY_NAME = re.compile(
    r"^(?:Memcpy|Memset|\[?CUDA mem(?:cpy|set)|hipMemcpy|hipMemset"
    r"|__amd_rocclr_(?:fill|copy)(?:Buffer|Image))",  # ROCclr's blit kernels (not its streamOps/scheduler ones)
    re.IGNORECASE,
)


def categorise(name: str, kind: str = "kernel", has_collective_args: bool = False) -> str:
    """The category of one GPU activity.

    `kind` is the activity kind (`kernel`, `memcpy`, `memset`);
    `has_collective_args` is true where the trace attached collective
    metadata to the kernel itself.
    """
    if kind in ("memcpy", "memset"):
        return MEMORY
    if has_collective_args or _COMMUNICATION_NAME.match(name):
        return COMMUNICATION
    if _MEMORY_NAME.match(name):
        return MEMORY
    return COMPUTE
