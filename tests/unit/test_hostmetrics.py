"""Host metrics: the reading loop's lines, the figures between two of them (worked out by hand
below), the columns and cell means, and the inventory's `metrics:` at the boundary."""

from __future__ import annotations

import shlex
import subprocess
import textwrap
from pathlib import Path

import pytest
from markupsafe import escape as html_escape

from chaoskit.errors import InputError
from chaoskit.hostmetrics import (
    SHARED_KERNEL,
    SHARED_KERNEL_WHY,
    HostSampler,
    HostSeries,
    columns,
    figures,
    parse_line,
    script_command,
    window_means,
)
from chaoskit.inventory import load_inventory
from chaoskit.report.experiment import results_table

# two lines of a /proc host, 2.0 s of host time apart (user nice system idle iowait irq softirq steal,
# load1, MemTotal kB, MemAvailable kB, sectors read, sectors written, net rx bytes, net tx bytes)
PROC_A = "proc 4 100 0 50 800 40 0 10 0 0.50 1000000 300000 1000 0 5000 100"
PROC_B = "proc 4 160 0 70 880 60 0 10 10 1.50 1000000 250000 1400 20 7000 300"


def test_proc_figures_between_two_lines() -> None:
    a, b = parse_line(10.0, 500.0, PROC_A), parse_line(12.1, 502.0, PROC_B)
    assert a is not None and b is not None
    got = figures(a, b)
    # CPU deltas 60 0 20 80 20 0 0 10: 190 ticks, of which idle 80 and iowait 20
    assert got["cpu_busy_pct"] == pytest.approx(100 * 90 / 190)  # 47.37
    assert got["cpu_iowait_pct"] == pytest.approx(100 * 20 / 190)
    assert got["cpu_steal_pct"] == pytest.approx(100 * 10 / 190)
    assert got["load1"] == 1.5
    assert got["mem_used_pct"] == pytest.approx(75.0)  # (1000000 - 250000) / 1000000
    # rates over the host's 2.0 s (not the control clock's 2.1 s): 400 sectors of 512 B, 20 sectors
    assert got["disk_read_Bps"] == pytest.approx(400 * 512 / 2.0)  # 102400
    assert got["disk_write_Bps"] == pytest.approx(20 * 512 / 2.0)  # 5120
    assert got["net_rx_Bps"] == pytest.approx(1000.0) and got["net_tx_Bps"] == pytest.approx(100.0)


def test_cgroup_figures_are_a_share_of_all_cores_and_leave_the_kernels_own_null() -> None:
    a = parse_line(1.0, 100.0, "cgroup 2 1000000000 0 100 5000 100")
    b = parse_line(2.0, 101.0, "cgroup 2 2500000000 4096 100 5600 400")
    assert a is not None and b is not None
    got = figures(a, b)
    assert got["cpu_busy_pct"] == pytest.approx(75.0)  # 1.5 s of CPU in 1 s on 2 cores
    assert got["disk_read_Bps"] == 4096 and got["disk_write_Bps"] == 0
    assert got["net_rx_Bps"] == 600 and got["net_tx_Bps"] == 300
    assert all(got[name] is None for name in SHARED_KERNEL)
    series = HostSeries("pg1", "cgroup:lab/pg1")
    series.add(None, a)
    series.add(a, b)
    assert len(series.samples) == 1  # a rate needs two lines
    assert series.null_figures() == dict.fromkeys(SHARED_KERNEL, SHARED_KERNEL_WHY)
    assert series.summary()["figures"]["cpu_busy_pct"] == {"mean": 75.0, "max": 75.0}


def test_a_counter_that_went_back_or_is_missing_gives_no_figure() -> None:
    a = parse_line(1.0, 100.0, "cgroup 2 5000000000 10 10 10 10")
    b = parse_line(2.0, 101.0, "cgroup 2 1000 - 20 5 10")  # the cgroup was made again; no blkio file
    assert a is not None and b is not None
    got = figures(a, b)
    assert got["cpu_busy_pct"] is None and got["disk_read_Bps"] is None and got["net_rx_Bps"] is None
    assert got["disk_write_Bps"] == 10 and got["net_tx_Bps"] == 0
    no_cpu = parse_line(3.0, 102.0, "cgroup 2 - - - 1 1")
    assert no_cpu is not None and figures(b, no_cpu)["cpu_busy_pct"] is None
    same_instant = parse_line(2.0, 101.0, "cgroup 2 3000 30 30 30 30")
    assert same_instant is not None and set(figures(b, same_instant).values()) == {None}


@pytest.mark.parametrize("line", ["", "proc 2 1 2 3", "cgroup x 1 2 3 4 5", "warning: something", "proc " + "x " * 16])
def test_lines_that_are_not_counters_are_skipped(line: str) -> None:
    assert parse_line(0.0, 0.0, line) is None


def test_the_reading_loop_prints_lines_the_parser_reads() -> None:
    """The shipped script, run here for a little over a second: every line is one the parser
    takes, in both sources (a cgroup that does not exist gives no CPU, not a wrong one)."""
    for source, cgroup in (("proc", None), ("cgroup", "chaoskit-no-such/cg")):
        out = subprocess.run(["timeout", "1.5", "sh", "-c", script_command(source, cgroup)],
                             capture_output=True, text=True).stdout.splitlines()
        assert len(out) >= 2, out
        parsed = [parse_line(float(i), float(i), line) for i, line in enumerate(out)]
        assert all(p is not None and p.source == source for p in parsed), out
        if source == "proc":
            assert all(p is not None and p.cpu_ticks is not None and p.mem_total_kb for p in parsed)
            busy = figures(parsed[0], parsed[1])["cpu_busy_pct"]  # type: ignore[arg-type]
            assert busy is not None and 0 <= busy <= 100
        else:
            assert all(p is not None and p.cpu_ns is None and p.net_rx_bytes is not None for p in parsed)


def test_the_cgroup_reaches_the_script_as_one_word_in_argument_position() -> None:
    words = shlex.split(script_command("cgroup", "chaoskit-lab/pg1"))
    assert words[:3] == ["exec", "sh", "-c"] and words[4:] == ["chaoskit-metrics", "cgroup", "chaoskit-lab/pg1"]
    assert "$1" in words[3] and "chaoskit-lab" not in words[3]  # the script itself carries no data


def test_columns_read_the_last_second_at_each_interval_end_and_skip_figures_never_counted() -> None:
    s = HostSeries("pg1", "cgroup:lab/pg1")
    s.samples = [(10.0, {"cpu_busy_pct": 20.0, "load1": None}), (11.0, {"cpu_busy_pct": 80.0, "load1": None})]
    cols = columns({"pg1": s}, [9.9, 10.0, 10.5, 11.0, 11.7])
    assert cols == {"cpu_busy_pct_pg1": [None, 20.0, 20.0, 80.0, 80.0]}


def test_window_means_count_the_seconds_that_ended_inside_the_window() -> None:
    s = HostSeries("pg1", "proc")
    s.samples = [(t, {"cpu_busy_pct": v}) for t, v in ((1.0, 10.0), (2.0, 20.0), (3.0, 60.0), (4.0, 90.0))]
    empty = HostSeries("pg2", "proc")
    # (1.0, 3.0]: the seconds ending at 2.0 and 3.0
    assert window_means({"pg1": s, "pg2": empty}, 1.0, 3.0) == {"pg1": 40.0, "pg2": None}


def test_a_host_that_cannot_be_read_is_said_and_the_others_are_kept() -> None:
    def broken(stop: object) -> object:
        raise OSError("ssh: connection refused")
        yield  # pragma: no cover

    def two_lines(stop: object) -> object:
        yield 1.0, 1.0, "cgroup 1 0 0 0 0 0"
        yield 2.0, 2.0, "cgroup 1 250000000 0 0 0 0"

    sampler = HostSampler({"a": ("proc", broken), "b": ("cgroup:x", two_lines)})  # type: ignore[dict-item]
    sampler.start()
    for reader in sampler._threads:  # both readers done before the run stops: b's loop ended on its own
        reader.join(timeout=10)
    series = sampler.stop()
    assert series["a"].error == "OSError: ssh: connection refused" and series["a"].samples == []
    assert series["a"].null_figures()["cpu_busy_pct"] == "OSError: ssh: connection refused"
    assert [v["cpu_busy_pct"] for _, v in series["b"].samples] == [25.0]
    assert series["b"].error == "the reading loop ended before the run did"


def test_experiment_table_shows_each_hosts_cpu_before_the_clients() -> None:
    cells = [{"workload": "w", "workers": 8, "tps": 100.0, "cpu_busy_pct_pg1": 42.4, "cpu_busy_pct_control": 7.0,
              "client_cpu_cores": 0.5}]
    headers, rows = results_table(cells)
    assert headers == ["workload", "workers", "TPS (median)", "CPU control", "CPU pg1", "client CPU"]
    assert rows == [["w", "8", "100", "7 %", "42 %", "0.50 cores"]]


def _inventory(tmp_path: Path, metrics: str) -> Path:
    p = tmp_path / "inv.yaml"
    p.write_text(textwrap.dedent(f"""\
        hosts:
          a:
            address: 10.1.0.1
            metrics: {metrics}
        clusters:
          c: {{engine: postgres, user: u, members: [a]}}
        """))
    return p


@pytest.mark.parametrize("metrics, message", [
    ("{source: cgroup}", "cgroup: give it with source: cgroup"),
    ("{source: proc, cgroup: x}", "cgroup: give it with source: cgroup"),
    ("{source: cgroup, cgroup: ../etc}", "String should match pattern"),
    ("{source: cgroup, cgroup: 'a/b; reboot'}", "String should match pattern"),
    ("{source: cgroup, cgroup: -rf}", "String should match pattern"),
    ("{source: agent}", "Input should be 'proc', 'cgroup' or 'none'"),
])
def test_inventory_metrics_refused_at_the_boundary(tmp_path: Path, metrics: str, message: str) -> None:
    path = _inventory(tmp_path, metrics)
    with pytest.raises(InputError) as info:
        load_inventory(path)
    assert info.value.line == 4 and (info.value.field or "").startswith("hosts.a.metrics"), info.value.one_line()
    assert message in info.value.detail and "\n" not in info.value.one_line()


def test_inventory_metrics_default_to_proc(tmp_path: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, "{source: cgroup, cgroup: chaoskit-lab/a}"))
    assert inv.hosts["a"].metrics.cgroup == "chaoskit-lab/a"
    p = tmp_path / "plain.yaml"
    p.write_text("hosts:\n  a: {address: 10.1.0.1}\nclusters:\n  c: {engine: postgres, user: u, members: [a]}\n")
    assert load_inventory(p).hosts["a"].metrics.source == "proc"


def test_ansible_inventory_says_it_as_chaoskit_metrics(tmp_path: Path) -> None:
    p = tmp_path / "hosts.yaml"
    p.write_text(textwrap.dedent("""\
        all:
          hosts:
            a: {ansible_host: 10.1.0.1, chaoskit_metrics: {source: none}}
            b: {ansible_host: 10.1.0.2}
          vars:
            chaoskit_cluster: {engine: postgres, user: u}
        """))
    inv = load_inventory(p)
    assert inv.hosts["a"].metrics.source == "none" and inv.hosts["b"].metrics.source == "proc"


def test_the_report_has_a_row_per_host(tmp_path: Path) -> None:
    """run.json's host_metrics (a cgroup host worked out above: 75 % busy) as the report shows it."""
    from chaoskit.report.rundir import RunDirectory
    from chaoskit.report.writer import render

    a = parse_line(1.0, 100.0, "cgroup 2 1000000000 0 100 5000 100")
    b = parse_line(2.0, 101.0, "cgroup 2 2500000000 4096 100 5600 400")
    assert a is not None and b is not None
    pg1 = HostSeries("pg1", "cgroup:chaoskit-lab/pg1")
    pg1.add(a, b)
    gone = HostSeries("pg2", "proc", error="HostUnreachable: pg2: no route")
    rd = RunDirectory.create(tmp_path, "drill", 1_800_000_000.0)
    rd.close()
    rd.write_json("run.json", {
        "schema_version": 3, "playbook": {"path": "p", "sha256": "0" * 64, "content": {
            "name": "drill", "description": "", "load": {"workload": "ledger", "workers": 1}, "baseline": 1}},
        "inventory": {"path": "i", "sha256": "0" * 64}, "cluster": {"name": "c", "engine": "postgres", "ha": "none"},
        "tool": {"version": "0"}, "operator": "ops@host", "run_id": "r", "started": 1_800_000_000.0,
        "ended": 1_800_000_060.0, "aborted": None, "ha": {}, "server": {}, "roles_before": [],
        "faults_injected": [], "actions": [], "host_metrics": {"pg1": pg1.summary(), "pg2": gone.summary()},
        "results": {"verdict": True, "faults": [], "checks": {}, "slo": {}}})
    render(rd.path, signed=False)
    html = (rd.path / "report.html").read_text()
    assert "<h2>Hosts during the run</h2>" in html
    assert "<td>pg1</td><td><code>cgroup:chaoskit-lab/pg1</code></td><td>1</td>" in html
    assert "75.0 % / 75.0 %" in html and "0 B/s" in html and "600 / 300 B/s" in html
    assert "cpu_iowait_pct, cpu_steal_pct, load1, mem_used_pct: " + html_escape(SHARED_KERNEL_WHY) in html
    assert "HostUnreachable: pg2: no route" in html


def test_the_control_nodes_line_is_read_in_process_as_the_script_reads_a_host() -> None:
    """The control node's counters come from this process (nothing it starts can outlive a killed
    controller) in the reading loop's own format: the same fields as the shipped script prints here."""
    from chaoskit.hostmetrics import local_lines, proc_line

    script = subprocess.run(["timeout", "1.2", "sh", "-c", script_command("proc", None)],
                            capture_output=True, text=True).stdout.splitlines()[0].split()
    mine = proc_line().split()
    assert len(mine) == len(script) == 17
    assert mine[:2] == script[:2] and mine[11] == script[11]  # source, cores, MemTotal
    a, b = parse_line(0.0, 0.0, proc_line()), parse_line(1.0, 1.0, proc_line())
    assert a is not None and b is not None and a.cpu_ticks is not None and a.net_rx_bytes is not None
    lines = local_lines(iter([False, False, True]).__next__)
    assert [parse_line(t, th, text) is not None for t, th, text in lines] == [True, True]
