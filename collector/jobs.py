"""Which job a GPU process belongs to: Slurm and Kubernetes, read from /proc.

For each compute process the backend lists on a GPU, `JobReader.identity`
reads, once per process (cached by pid and start time, so a reused pid is
read again):

- Slurm: `SLURM_JOB_ID`, `SLURM_STEP_ID`, `SLURM_PROCID` and
  `SLURM_JOB_USER` from `/proc/PID/environ`; where that is unreadable (it
  needs the process's uid or CAP_SYS_PTRACE) or names no job, the job and
  step from the cgroup path (`/slurm/uid_U/job_J/step_S/...` with cgroup v1,
  `.../slurmstepd.scope/job_J/step_S/...` with v2);
- Kubernetes: the pod UID and container ID from `/proc/PID/cgroup`, with
  cgroup v1 or v2 and the systemd driver
  (`kubepods-burstable-pod<uid, _ for ->.slice/cri-containerd-<id>.scope`)
  or the cgroupfs one (`kubepods/burstable/pod<uid>/<id>`); the namespace
  and pod name from the process's environment (`POD_NAMESPACE`,
  `POD_NAME`, as a downward-API `env` sets them) or from a downward-API
  volume at `/etc/podinfo/namespace` and `/etc/podinfo/name` inside the
  container;
- `NSpid` from `/proc/PID/status`: the process's pid in each PID namespace
  from the host's outward, so that a pid a trace recorded inside a
  container (the last one) matches the host's (the first).

Anything unreadable or absent is None, never an error: a process may end
between the backend's list and the read, and /proc of another user's
process is partly closed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PROC_ROOT = Path("/proc")
# Where the Kubernetes docs' downward-API example mounts its volume.
PODINFO_DIR = Path("etc/podinfo")

_SLURM_CGROUP = re.compile(r"/job_(?P<job>\d+)(?:/step_(?P<step>[^/\s]+))?")
_POD_UID = re.compile(r"pod(?P<uid>[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})(?:\.slice)?(?:/|$)")
_CONTAINER = re.compile(r"/(?:cri-containerd-|crio-|docker-|containerd-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$")


@dataclass(frozen=True)
class JobIdentity:
    """The job columns of one `processes` row; None where unknown."""

    slurm_job_id: str | None = None
    slurm_step_id: str | None = None
    slurm_procid: int | None = None
    slurm_job_user: str | None = None
    k8s_pod_uid: str | None = None
    k8s_container_id: str | None = None
    k8s_namespace: str | None = None
    k8s_pod_name: str | None = None
    # The pid in each PID namespace, the host's (the /proc read) first.
    nspid: tuple[int, ...] | None = None
    _columns: dict[str, object] | None = field(default=None, init=False, repr=False, compare=False)

    def columns(self) -> dict[str, object]:
        """The `processes` columns this identity fills (made once; do not change it)."""
        if self._columns is None:
            object.__setattr__(self, "_columns", self._make_columns())
        assert self._columns is not None
        return self._columns

    def _make_columns(self) -> dict[str, object]:
        return {
            "slurm_job_id": self.slurm_job_id,
            "slurm_step_id": self.slurm_step_id,
            "slurm_procid": self.slurm_procid,
            "slurm_job_user": self.slurm_job_user,
            "k8s_pod_uid": self.k8s_pod_uid,
            "k8s_container_id": self.k8s_container_id,
            "k8s_namespace": self.k8s_namespace,
            "k8s_pod_name": self.k8s_pod_name,
            "nspid": None if self.nspid is None else list(self.nspid),
        }


UNKNOWN = JobIdentity()
JOB_COLUMNS: tuple[str, ...] = tuple(UNKNOWN.columns())


def _read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (OSError, ValueError):
        return None


def _read_text(path: Path) -> str | None:
    data = _read_bytes(path)
    return None if data is None else data.decode("utf-8", "replace")


def read_start_ticks(stat_path: str) -> int | None:
    """`start_ticks` of the file at `stat_path`, read with one open and one
    read: the check made for every known process on every slow tick (about
    10 us, against 40 us through pathlib)."""
    try:
        fd = os.open(stat_path, os.O_RDONLY)
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
    except OSError:
        return None
    return start_ticks(data)


def start_ticks(stat: bytes | str | None) -> int | None:
    """Field 22 of `/proc/PID/stat` (the start time, in clock ticks since
    boot); the command name before it is in parentheses and may hold spaces."""
    if not stat:
        return None
    if isinstance(stat, str):
        stat = stat.encode()
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def parse_environ(data: bytes | None) -> dict[str, str]:
    """`/proc/PID/environ`: NUL-separated NAME=value pairs."""
    if not data:
        return {}
    pairs = (item.decode("utf-8", "replace").partition("=") for item in data.split(b"\0") if item)
    return {name: value for name, _, value in pairs}


def parse_nspid(status: str | None) -> tuple[int, ...] | None:
    """The `NSpid:` line of `/proc/PID/status` (Linux 4.1 and newer)."""
    for line in (status or "").splitlines():
        if line.startswith("NSpid:"):
            try:
                return tuple(int(part) for part in line.split()[1:]) or None
            except ValueError:
                return None
    return None


def cgroup_paths(cgroup: str | None) -> list[str]:
    """The paths of `/proc/PID/cgroup` (`ID:controllers:path`, one line per
    v1 hierarchy, `0::path` for v2)."""
    return [line.split(":", 2)[2] for line in (cgroup or "").splitlines() if line.count(":") >= 2]


def slurm_from_cgroup(paths: list[str]) -> tuple[str | None, str | None]:
    """(job id, step id) of the first path under a Slurm job."""
    for path in paths:
        if "slurm" in path and (match := _SLURM_CGROUP.search(path)):
            return match["job"], match["step"]
    return None, None


def kubernetes_from_cgroup(paths: list[str]) -> tuple[str | None, str | None]:
    """(pod UID, container ID) of the first path under a kubepods cgroup."""
    for path in paths:
        if "kubepods" not in path:
            continue
        pod = _POD_UID.search(path)
        if pod is None:
            continue
        container = _CONTAINER.search(path)
        return pod["uid"].replace("_", "-"), None if container is None else container["id"]
    return None, None


def _int_or_none(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _podinfo(process_dir: Path, name: str) -> str | None:
    text = _read_text(process_dir / "root" / PODINFO_DIR / name)
    return text.strip() or None if text is not None else None


def read_identity(process_dir: Path) -> JobIdentity:
    """The job identity of the process whose /proc folder is `process_dir`."""
    env = parse_environ(_read_bytes(process_dir / "environ"))
    paths = cgroup_paths(_read_text(process_dir / "cgroup"))
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    step = env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")
    if job is None:
        job, step = slurm_from_cgroup(paths)
    pod_uid, container_id = kubernetes_from_cgroup(paths)
    namespace = pod_name = None
    if pod_uid is not None:
        namespace = env.get("POD_NAMESPACE") or _podinfo(process_dir, "namespace")
        pod_name = env.get("POD_NAME") or _podinfo(process_dir, "name")
    return JobIdentity(
        slurm_job_id=job,
        slurm_step_id=step,
        slurm_procid=_int_or_none(env.get("SLURM_PROCID")) if job is not None else None,
        slurm_job_user=env.get("SLURM_JOB_USER") if job is not None else None,
        k8s_pod_uid=pod_uid,
        k8s_container_id=container_id,
        k8s_namespace=namespace,
        k8s_pod_name=pod_name,
        nspid=parse_nspid(_read_text(process_dir / "status")),
    )


class JobReader:
    """`identity(pid)`, read once per process and cached by (pid, start time).

    Each call reads `/proc/PID/stat` (one small read) to tell a live process
    from a new one that reuses its pid; the rest is read on the first call
    for that process only. `forget_others` drops the processes no longer seen.
    """

    def __init__(self, proc_root: Path = DEFAULT_PROC_ROOT) -> None:
        self.proc_root = Path(proc_root)
        self._root = str(self.proc_root)
        self._cache: dict[int, tuple[int | None, JobIdentity]] = {}
        self.reads = 0  # full reads made (the cache's misses)

    def identity(self, pid: int) -> JobIdentity:
        started = read_start_ticks(f"{self._root}/{pid}/stat")
        cached = self._cache.get(pid)
        if cached is not None and cached[0] == started:
            return cached[1]
        identity = read_identity(self.proc_root / str(pid))
        self.reads += 1
        self._cache[pid] = (started, identity)
        return identity

    def forget_others(self, live_pids: set[int]) -> None:
        for pid in [pid for pid in self._cache if pid not in live_pids]:
            del self._cache[pid]


__all__ = ["DEFAULT_PROC_ROOT", "JOB_COLUMNS", "JobIdentity", "JobReader", "UNKNOWN", "read_identity"]
