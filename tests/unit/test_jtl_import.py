"""`chaoskit import jtl`: a JTL written here by hand, with its outage edges chosen, becomes a run
directory whose figures are those worked out below from the text; bad input is one line, exit 2,
and no run directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaoskit.imports.jtl import parse_instant

HEADER = "timeStamp,elapsed,label,responseCode,responseMessage,threadName,success\n"


def _jtl(path: Path) -> Path:
    """Two threads, a sample every 100 ms from t = 1000.0 s (epoch) to 1019.9 s, each 10 ms long.
    Thread A 1-1 fails from 1010.1 s to 1012.0 s (its first failure 08006, then 08001), thread
    A 1-2 from 1010.1 s to 1013.0 s (all 08001)."""
    lines = [HEADER]
    for i in range(200):
        start_ms = 1_000_000 + 100 * i
        for thread, back_ms in (("A 1-1", 1_012_100), ("A 1-2", 1_013_100)):
            if 1_010_100 <= start_ms < back_ms:
                code = "08006" if (thread == "A 1-1" and start_ms == 1_010_100) else "08001"
                lines.append(f"{start_ms},10,ins,{code},broken,{thread},false\n")
            else:
                lines.append(f"{start_ms},10,ins,200,OK,{thread},true\n")
    path.write_text("".join(lines))
    return path


def _import(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "chaoskit.cli", "import", "jtl", *args], capture_output=True,
                          text=True, timeout=120)


def test_the_outage_of_a_hand_written_jtl_is_measured_against_the_given_instant(tmp_path: Path) -> None:
    """Fault at 1010.05 s. Thread A 1-1's last ok sample ended 1010.01, its first ok after ended
    1012.11: back 2.06 s after the fault; A 1-2's 1013.11: 3.06 s. So first client back 2.06 s,
    all clients back 3.06 s; 20 + 30 failed samples, of which one (A 1-1's 08006 write, the
    connection broke) is an unknown commit and 49 failed (08001: never connected)."""
    jtl = _jtl(tmp_path / "r.jtl")
    res = _import(str(jtl), "--fault-at", "1970-01-01T00:16:50.05Z", "--out", str(tmp_path / "out"),
                  "--name", "hand")
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "out").iterdir()
    ev = json.loads((run_dir / "run.json").read_text())
    (f,) = ev["results"]["faults"]
    assert f["t_fault"] == pytest.approx(1010.05)
    assert f["rto_first_client_s"] == pytest.approx(2.06, abs=1e-6)
    assert f["rto_all_clients_s"] == pytest.approx(3.06, abs=1e-6)
    assert f["per_client_rto_s"] == {"1": pytest.approx(2.06, abs=1e-6), "2": pytest.approx(3.06, abs=1e-6)}
    assert f["t_last_ok"] == pytest.approx(1010.01) and f["t_first_ok"] == pytest.approx(1012.11)
    assert ev["source"]["threads"] == {"A 1-1": 1, "A 1-2": 2} and ev["source"]["samples"] == 400
    assert (ev["totals"]["ok"], ev["totals"]["info"], ev["totals"]["fail"]) == (350, 1, 49)
    assert f["outcome"] == "not_observed" and f["t_detect"] is None and ev["results"]["rpo"] is None
    # the throughput before the fault: 2 threads x 10 samples/s
    assert ev["results"]["baseline_tps"] == pytest.approx(20.0)
    assert f["effect"]["min_tps"] == 0.0
    for name in ("report.html", "timeline.csv", "plots/timeline.png", "methodology.md"):
        assert (run_dir / name).exists(), name
    assert "RTO first client back 2.06 s, all clients back 3.06 s (2 clients)" in res.stdout


def test_instants_from_a_runs_events_carry_their_host_clock_window(tmp_path: Path) -> None:
    jtl = _jtl(tmp_path / "r.jtl")
    events = tmp_path / "events.jsonl"
    events.write_text(json.dumps({"kind": "run_started", "t": 999.0}) + "\n" + json.dumps(
        {"kind": "fault_injected", "t": 1010.05, "id": "abc", "fault_kind": "kill", "host": "pg1",
         "applied_from": 1010.04, "uncertainty_s": 0.002}) + "\n")
    res = _import(str(jtl), "--faults", str(events), "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "out").iterdir()
    (f,) = json.loads((run_dir / "run.json").read_text())["results"]["faults"]
    assert (f["id"], f["kind"], f["target_host"]) == ("abc", "kill", "pg1")
    assert f["t_open"] == pytest.approx(1010.038) and f["rto_first_client_s"] == pytest.approx(2.06, abs=1e-6)


@pytest.mark.parametrize(("args", "said"), [
    (["--fault-at", "yesterday"], "command line: --fault-at: 'yesterday' is not a UTC instant"),
    (["--fault-at", "2026-12-03T19:02:36+08:00"], "is not a UTC instant"),
    (["--fault-at", "2026-12-03T19:02:36Z"], "command line: --fault-at: no fault instant falls within"),
    ([], "give the fault instants"),
    (["--fault-at", "1970-01-01T00:16:50Z", "--timestamp", "middle"], "--timestamp: 'middle': start or end"),
    (["--fault-at", "1970-01-01T00:16:50Z", "--name", "a b"], "--name: 'a b' is not a name"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path: Path, args: list[str], said: str) -> None:
    jtl = _jtl(tmp_path / "r.jtl")
    res = _import(str(jtl), *args, "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and said in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert not (tmp_path / "out").exists()


def test_a_jtl_or_events_file_it_cannot_read_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jtl"
    bad.write_text(HEADER + "1000,10,ins,200,OK,t,maybe\n")
    res = _import(str(bad), "--fault-at", "1970-01-01T00:16:40Z", "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and f"{bad}:2: field success is 'maybe'" in res.stderr
    events = tmp_path / "events.jsonl"
    events.write_text('{"kind": "fault_injected", "t": 1010}\n{not json\n')
    res = _import(str(_jtl(tmp_path / "r.jtl")), "--faults", str(events), "--out", str(tmp_path / "out"))
    assert res.returncode == 2 and f"{events}:2: not a JSON line" in res.stderr
    res = _import(str(tmp_path / "nowhere.jtl"), "--fault-at", "1970-01-01T00:16:40Z", "--out", str(tmp_path / "o"))
    assert res.returncode == 2 and "nowhere.jtl: cannot read it" in res.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize(("text", "t"), [
    ("2026-12-03T19:02:36.298531Z", 1796324556.298531), ("2026-12-03 19:02:36", 1796324556.0),
    ("2026-12-03T19:02:36.5+00:00", 1796324556.5)])
def test_an_instant_is_read_as_utc_to_the_microsecond(text: str, t: float) -> None:
    """1796324556 s is 2026-12-03T19:02:36Z (date -u -d @1796324556)."""
    assert parse_instant(text) == pytest.approx(t, abs=1e-6)


def test_the_same_file_imported_twice_gets_two_sealed_directories(tmp_path: Path) -> None:
    """Issue 43: a second import of the same file ended in FileExistsError (a traceback)."""
    jtl = _jtl(tmp_path / "r.jtl")
    for _ in range(2):
        res = _import(str(jtl), "--fault-at", "1970-01-01T00:16:50.05Z", "--out", str(tmp_path / "out"),
                      "--name", "hand")
        assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    first, second = sorted((tmp_path / "out").iterdir())
    assert second.name == first.name + "-2"
    for d in (first, second):
        check = subprocess.run([sys.executable, "-m", "chaoskit.cli", "verify", str(d)], capture_output=True,
                               text=True, timeout=60)
        assert check.returncode == 0 and "intact" in check.stdout, check.stderr


def test_a_fault_inside_the_warm_up_is_measured_and_reported(tmp_path: Path) -> None:
    """Issue 43: the shipped JMeter fixture with its fault 3.3 s after the first sample (inside the
    5 s warm-up: no baseline, so no dip) ended in `UndefinedError: ... 'dip_depth'` from the
    report's template, leaving no report and no manifest."""
    jtl = Path(__file__).parents[1] / "fixtures" / "tools" / "jmeter-2.13-server-stopped" / "results.jtl"
    res = _import(str(jtl), "--fault-at", "2026-12-03T05:33:33.000Z", "--out", str(tmp_path / "out"))
    assert res.returncode == 0, res.stderr
    (run_dir,) = (tmp_path / "out").iterdir()
    ev = json.loads((run_dir / "run.json").read_text())
    assert ev["incomplete"] is None and ev["results"]["baseline_tps"] is None
    assert "not measured" in (run_dir / "report.html").read_text() and (run_dir / "manifest.json").exists()


def test_an_import_whose_report_fails_is_sealed_incomplete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaoskit.imports.jtl import GivenFault, ImportSettings, import_jtl
    from chaoskit.report.manifest import verify, write_manifest

    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("no fonts")

    monkeypatch.setattr("chaoskit.report.imported.timeline_plot", broken)
    path, incomplete = import_jtl(_jtl(tmp_path / "r.jtl"), [GivenFault("f0", 1010.05)], tmp_path / "out",
                                  ImportSettings(name="hand"))
    assert incomplete and incomplete.startswith("plots: ValueError: no fonts")
    ev = json.loads((path / "run.json").read_text())
    assert ev["incomplete"] == incomplete and ev["results"]["faults"][0]["rto_all_clients_s"] == pytest.approx(3.06)
    assert "INCOMPLETE" in (path / "report.html").read_text()
    assert "Traceback" in (path / "logs" / "chaoskit-error.txt").read_text()
    write_manifest(path)
    assert verify(path).problems == []
