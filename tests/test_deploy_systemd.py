"""The systemd unit and its /metrics drop-in in deploy/: the unit opens no
IP socket; the drop-in turns on --metrics-address and allows exactly the
families its TCP socket needs."""

from __future__ import annotations

from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def _settings(path: Path) -> list[tuple[str, str]]:
    pairs = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith(("#", "[")) and "=" in line:
            key, value = line.split("=", 1)
            pairs.append((key, value))
    return pairs


def _families(settings: list[tuple[str, str]], start: set[str]) -> set[str]:
    """RestrictAddressFamilies= as systemd reads assignments in order: an
    empty one undoes what came before, a list adds to it."""
    families = set(start)
    for key, value in settings:
        if key == "RestrictAddressFamilies":
            families = set() if not value else families | set(value.split())
    return families


def test_the_unit_allows_no_ip_socket():
    assert _families(_settings(DEPLOY / "gpulens-collector.service"), set()) == {"AF_UNIX", "AF_NETLINK"}


def test_the_metrics_drop_in_allows_ipv4_and_ipv6_beside_the_units_families():
    unit = _families(_settings(DEPLOY / "gpulens-collector.service"), set())
    assert _families(_settings(DEPLOY / "gpulens-collector-metrics.conf"), unit) == {"AF_UNIX", "AF_NETLINK", "AF_INET", "AF_INET6"}


def test_the_metrics_drop_in_replaces_the_command_with_one_serving_metrics():
    starts = [value for key, value in _settings(DEPLOY / "gpulens-collector-metrics.conf") if key == "ExecStart"]
    assert starts[0] == "" and len(starts) == 2 and "--metrics-address 0.0.0.0:19400" in starts[1]


def test_the_start_limits_are_in_the_unit_section_where_systemd_reads_them():
    text = (DEPLOY / "gpulens-collector.service").read_text(encoding="utf-8")
    unit_section = text.split("\n[Service]\n")[0]
    assert "StartLimitIntervalSec=300" in unit_section and "StartLimitBurst=10" in unit_section
