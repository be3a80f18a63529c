"""How many CPUs this process may use: the fewest of its affinity mask
(`taskset`, a Slurm step's cpuset) and its cgroup's CPU quota (a container's
`--cpus`, a Kubernetes limit), not the machine's `os.cpu_count()`. Under a
4-CPU Slurm step on a 128-core node that is 4, not 128.

    usable_cpus()  # what worker pools size themselves by
"""

from __future__ import annotations

import math
import os
from pathlib import Path


def usable_cpus(root: Path = Path("/")) -> int:
    """The CPUs this process may keep busy, at least 1. `root` is where
    `/proc` and `/sys/fs/cgroup` are read from (a test's copy of them)."""
    cpus = _affinity() if root == Path("/") else None
    if cpus is None:
        cpus = os.cpu_count() or 1
    quota = cgroup_cpu_quota(root)
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def _affinity() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return None


def cgroup_cpu_quota(root: Path = Path("/")) -> float | None:
    """The CPU quota (in CPUs, 2.5 for `--cpus 2.5`) of this process's
    cgroup and its parents, the smallest; None where none is set or the
    files are not there. cgroup v2 (`cpu.max`) or v1 (`cpu.cfs_quota_us` over
    `cpu.cfs_period_us`)."""
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    quotas: list[float] = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            quotas += _v2_quotas(root / "sys/fs/cgroup", path)
        elif "cpu" in controllers.split(","):
            quotas += _v1_quotas(root / "sys/fs/cgroup", controllers, path)
    return min(quotas) if quotas else None


def _folders(base: Path, path: str) -> list[Path]:
    """`base/path` and each parent up to `base` (a quota anywhere above limits too)."""
    parts = [part for part in path.split("/") if part]
    return [base.joinpath(*parts[:n]) for n in range(len(parts), -1, -1)]


def _v2_quotas(base: Path, path: str) -> list[float]:
    found = []
    for folder in _folders(base, path):
        try:
            quota, _, period = (folder / "cpu.max").read_text().strip().partition(" ")
        except OSError:
            continue
        if quota != "max" and period:
            found.append(int(quota) / int(period))
    return found


def _v1_quotas(base: Path, controllers: str, path: str) -> list[float]:
    found = []
    for mount in (base / controllers, base / "cpu", base / "cpu,cpuacct"):
        if not mount.is_dir():
            continue
        for folder in _folders(mount, path):
            try:
                quota = int((folder / "cpu.cfs_quota_us").read_text())
                period = int((folder / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            if quota > 0 and period > 0:
                found.append(quota / period)
        break
    return found
