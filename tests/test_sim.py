from gpulens.collector.sim import SimBackend

T0_NS = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z


def _series(backend: SimBackend, gpu: int, seconds: int, interval_s: float = 0.5) -> list[dict]:
    return [backend.sample(gpu, T0_NS + int(k * interval_s * 1e9), slow=False).values for k in range(int(seconds / interval_s))]


def test_sim_same_seed_gives_identical_rows():
    first = _series(SimBackend(seed=7), 3, 20)
    second = _series(SimBackend(seed=7), 3, 20)
    assert first == second


def test_sim_different_seed_gives_different_rows():
    assert _series(SimBackend(seed=1), 0, 10) != _series(SimBackend(seed=2), 0, 10)


def test_sim_capped_gpu_sits_at_the_limit_with_power_cap_reason():
    backend = SimBackend(gpus=8, capped_gpu=5)
    rows = _series(backend, 5, 30)
    capped = [r for r in rows if "sw_power_cap" in r["throttle_reasons"]]
    assert capped, "the capped GPU never reported the power-cap reason"
    assert all(r["power_w"] == 700.0 for r in capped)
    assert all(r["sm_clock_mhz"] < 1980 for r in capped)
    assert rows[-1]["power_violation_ns"] > 0


def test_sim_uncapped_gpu_stays_below_the_limit():
    rows = _series(SimBackend(gpus=8, capped_gpu=5), 2, 30)
    assert max(r["power_w"] for r in rows) < 700.0
    assert not any("sw_power_cap" in r["throttle_reasons"] for r in rows)
    assert rows[-1]["power_violation_ns"] == 0


def test_sim_training_nvlink_is_busy_only_in_communication_phases():
    rows = _series(SimBackend(step_s=2.0), 0, 20, interval_s=0.1)
    busy = [r for r in rows if r["link_tx_bytes_per_s"] > 200e9]
    quiet = [r for r in rows if r["link_tx_bytes_per_s"] < 20e9]
    assert busy and quiet
    assert max(r["gpu_util_pct"] for r in busy) < max(r["gpu_util_pct"] for r in quiet)


def test_sim_inference_has_idle_stretches_at_idle_power():
    rows = _series(SimBackend(profile="inference", seed=3), 0, 120)
    idle = [r for r in rows if r["gpu_util_pct"] == 0]
    assert idle and len(idle) < len(rows)
    assert all(r["power_w"] < 100 for r in idle)
    assert all("gpu_idle" in r["throttle_reasons"] for r in idle)


def test_sim_energy_integrates_power_over_time():
    backend = SimBackend()
    rows = _series(backend, 0, 10, interval_s=1.0)
    expected_j = sum(r["power_w"] for r in rows[1:])  # 1 s between samples
    assert abs(rows[-1]["energy_j"] - expected_j) < 0.01


def test_sim_processes_only_on_slow_ticks():
    backend = SimBackend()
    assert backend.sample(0, T0_NS + 500_000_000, slow=False).processes is None
    processes = backend.sample(0, T0_NS + 600_000_000, slow=True).processes
    assert processes is not None and processes[0].pid == 4000


def test_sim_discover_reports_h100_limits_and_nvlink():
    devices = SimBackend(gpus=4).discover()
    assert [d.gpu_index for d in devices] == [0, 1, 2, 3]
    assert devices[0].power_limit_w == 700.0
    assert devices[0].link_kind == "nvlink" and devices[0].link_count == 18
    assert len({d.gpu_uuid for d in devices}) == 4
