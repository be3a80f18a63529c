"""Worker pools are sized by the CPUs this process may use: the cgroup's
quota (v2 and v1) as well as the affinity mask, never the machine's count."""

from __future__ import annotations

import os
from pathlib import Path

from gpulens.collector.cpus import cgroup_cpu_quota, usable_cpus


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_cpus_cgroup_v2_quota_of_a_slurm_step(tmp_path):
    root = _tree(tmp_path, {"proc/self/cgroup": "0::/slurm/job_1/step_0\n",
                            "sys/fs/cgroup/slurm/job_1/step_0/cpu.max": "400000 100000\n",
                            "sys/fs/cgroup/slurm/cpu.max": "max 100000\n"})
    assert (cgroup_cpu_quota(root), usable_cpus(root) <= 4) == (4.0, True)


def test_cpus_cgroup_v2_quota_of_a_parent_limits_too(tmp_path):
    root = _tree(tmp_path, {"proc/self/cgroup": "0::/kubepods/pod/c\n",
                            "sys/fs/cgroup/kubepods/pod/c/cpu.max": "max 100000\n",
                            "sys/fs/cgroup/kubepods/pod/cpu.max": "250000 100000\n"})
    assert cgroup_cpu_quota(root) == 2.5


def test_cpus_cgroup_v1_quota(tmp_path):
    root = _tree(tmp_path, {"proc/self/cgroup": "4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n",
                            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "150000\n",
                            "sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n"})
    assert (cgroup_cpu_quota(root), usable_cpus(root) <= 2) == (1.5, True)


def test_cpus_without_a_quota_is_the_cpu_count(tmp_path):
    root = _tree(tmp_path, {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "max 100000\n"})
    assert (cgroup_cpu_quota(root), usable_cpus(root)) == (None, os.cpu_count())


def test_cpus_here_are_at_most_the_affinity_mask():
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))
