"""Job identity of GPU processes, read from a fake /proc tree: Slurm and
Kubernetes, cgroup v1 and v2, the systemd and cgroupfs drivers, a nested
PID namespace, and an environ that cannot be read."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from gpulens.collector.backend import DeviceInfo, DeviceSample, ProcessSample
from gpulens.collector.daemon import CollectOptions, Collector
from gpulens.collector.jobs import JOB_COLUMNS, JobIdentity, JobReader, read_identity

POD_UID = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
OTHER_POD_UID = "7a6b5c4d-3e2f-4a1b-9c8d-7e6f5a4b3c2d"
CONTAINER = "3f" * 32
OTHER_CONTAINER = "a1" * 32


def _stat(pid: int, start_ticks: int) -> str:
    # pid (comm) state ppid ... field 22 is starttime; the name holds a space and a ')'
    fields = ["S"] + ["0"] * 18 + [str(start_ticks)] + ["0"] * 10
    return f"{pid} (pt_main thread)) " + " ".join(fields) + "\n"


def _process(proc: Path, pid: int, cgroup: str, environ: dict[str, str] | None, nspid: str,
             start_ticks: int = 1000) -> Path:
    folder = proc / str(pid)
    folder.mkdir(parents=True)
    (folder / "stat").write_text(_stat(pid, start_ticks))
    (folder / "cgroup").write_text(cgroup)
    (folder / "status").write_text(f"Name:\tpython\nTgid:\t{pid}\nPid:\t{pid}\nNSpid:\t{nspid}\nUid:\t0\t0\t0\t0\n")
    if environ is None:
        # Unreadable: a folder where the file should be fails to read like
        # EACCES does (tests run as root, to whom mode 000 is no bar).
        (folder / "environ").mkdir()
    else:
        (folder / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in environ.items()))
    return folder


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    # Slurm, cgroup v1, environ readable
    _process(root, 101, "12:memory:/slurm/uid_1000/job_4242/step_0/task_1\n11:devices:/slurm/uid_1000/job_4242/step_0\n",
             {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_JOB_USER": "alice",
              "PATH": "/usr/bin"}, "101")
    # Slurm, cgroup v2, environ unreadable: job and step from the cgroup
    _process(root, 102, "0::/system.slice/node01_slurmstepd.scope/job_5151/step_batch/user/task_0\n", None, "102")
    # Kubernetes, cgroup v2, systemd driver, names from the downward-API env, nested PID namespace
    _process(root, 201,
             "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
             f"{POD_UID.replace('-', '_')}.slice/cri-containerd-{CONTAINER}.scope\n",
             {"POD_NAME": "trainer-0", "POD_NAMESPACE": "ml", "HOME": "/root"}, "201\t1")
    # Kubernetes, cgroup v1, cgroupfs driver, names from a downward-API volume, two nested namespaces
    folder = _process(root, 202,
                      f"12:memory:/kubepods/burstable/pod{OTHER_POD_UID}/{OTHER_CONTAINER}\n"
                      f"11:cpu,cpuacct:/kubepods/burstable/pod{OTHER_POD_UID}/{OTHER_CONTAINER}\n",
                      {"HOME": "/root"}, "202\t40\t7")
    (folder / "root" / "etc" / "podinfo").mkdir(parents=True)
    (folder / "root" / "etc" / "podinfo" / "namespace").write_text("inference\n")
    (folder / "root" / "etc" / "podinfo" / "name").write_text("server-7f9c\n")
    # Kubernetes, cgroup v1, systemd driver, docker runtime, no names anywhere
    _process(root, 203,
             "5:pids:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
             f"{POD_UID.replace('-', '_')}.slice/docker-{CONTAINER}.scope\n",
             {}, "203")
    # No scheduler: a login session
    _process(root, 301, "0::/user.slice/user-1000.slice/session-3.scope\n", {"USER": "bob"}, "301")
    return root


def test_read_identity_slurm_from_the_environment(proc: Path) -> None:
    assert read_identity(proc / "101") == JobIdentity(
        slurm_job_id="4242", slurm_step_id="0", slurm_procid=5, slurm_job_user="alice", nspid=(101,))


def test_read_identity_slurm_from_the_cgroup_v2_path_when_environ_is_unreadable(proc: Path) -> None:
    assert read_identity(proc / "102") == JobIdentity(slurm_job_id="5151", slurm_step_id="batch", nspid=(102,))


def test_read_identity_kubernetes_systemd_cgroup_v2_with_downward_api_env(proc: Path) -> None:
    assert read_identity(proc / "201") == JobIdentity(
        k8s_pod_uid=POD_UID, k8s_container_id=CONTAINER, k8s_namespace="ml", k8s_pod_name="trainer-0", nspid=(201, 1))


def test_read_identity_kubernetes_cgroupfs_v1_with_downward_api_files(proc: Path) -> None:
    assert read_identity(proc / "202") == JobIdentity(
        k8s_pod_uid=OTHER_POD_UID, k8s_container_id=OTHER_CONTAINER, k8s_namespace="inference",
        k8s_pod_name="server-7f9c", nspid=(202, 40, 7))


def test_read_identity_kubernetes_systemd_cgroup_v1_docker_without_names(proc: Path) -> None:
    assert read_identity(proc / "203") == JobIdentity(k8s_pod_uid=POD_UID, k8s_container_id=CONTAINER, nspid=(203,))


def test_read_identity_of_a_process_under_no_scheduler_is_only_its_nspid(proc: Path) -> None:
    assert read_identity(proc / "301") == JobIdentity(nspid=(301,))


def test_read_identity_of_a_process_gone_is_all_none(proc: Path) -> None:
    assert read_identity(proc / "999") == JobIdentity()


def test_job_reader_reads_a_process_once(proc: Path) -> None:
    reader = JobReader(proc)
    first = [reader.identity(pid) for pid in (101, 201, 101, 201, 101)]
    assert reader.reads == 2
    assert first[0] == first[2] == first[4]


def test_job_reader_reads_a_reused_pid_again(proc: Path) -> None:
    reader = JobReader(proc)
    assert reader.identity(101).slurm_job_id == "4242"
    # pid 101 ends; a new process of another job gets the same pid, started later
    (proc / "101" / "stat").write_text(_stat(101, 9000))
    (proc / "101" / "environ").write_bytes(b"SLURM_JOB_ID=4343\0SLURM_PROCID=0\0")
    assert reader.identity(101).slurm_job_id == "4343"
    assert reader.reads == 2


class _TwoProcessBackend:
    name = "scripted"

    def discover(self):
        return [DeviceInfo(gpu_index=i, gpu_uuid=f"GPU-{i}", vendor="nvidia", model="NVIDIA H100 80GB HBM3") for i in (0, 1)]

    def sample(self, gpu_index, ts_ns, slow):
        processes = [ProcessSample(pid=(101, 202)[gpu_index], used_mem_bytes=1 << 30, process_name="python")]
        return DeviceSample(values={"power_w": 100.0}, processes=processes if slow else None)

    def poll_events(self):
        return []

    def close(self):
        pass


def test_collector_writes_the_job_columns_of_each_process_row(tmp_path: Path, proc: Path) -> None:
    out = tmp_path / "data"
    Collector(_TwoProcessBackend(), CollectOptions(out=out, interval_s=0.1, slow_every_s=0.1, duration_s=3.0,
                                                    host="node-a", proc_root=proc)).run()
    table = pq.read_table(sorted((out / "processes").rglob("*.parquet"))[0])
    rows = {(row["gpu_index"], tuple((name, tuple(row[name]) if name == "nspid" else row[name]) for name in JOB_COLUMNS))
            for row in table.to_pylist()}
    assert rows == {
        (0, (("slurm_job_id", "4242"), ("slurm_step_id", "0"), ("slurm_procid", 5), ("slurm_job_user", "alice"),
             ("k8s_pod_uid", None), ("k8s_container_id", None), ("k8s_namespace", None), ("k8s_pod_name", None),
             ("nspid", (101,)))),
        (1, (("slurm_job_id", None), ("slurm_step_id", None), ("slurm_procid", None), ("slurm_job_user", None),
             ("k8s_pod_uid", OTHER_POD_UID), ("k8s_container_id", OTHER_CONTAINER), ("k8s_namespace", "inference"),
             ("k8s_pod_name", "server-7f9c"), ("nspid", (202, 40, 7)))),
    }
