"""Drills end to end on the lab: files, exact phase ordering, RTO recomputed from the evidence,
RPO verdicts, SLO exit codes, Ctrl-C heals, the HTML parses, plots are real images."""

from __future__ import annotations

import csv
import gzip
import json
import os
import re
import signal
import subprocess
import time
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import matplotlib.image as mpimg
import pytest
from drillrun import LEAN, run, shortened

from chaoskit.faults.manager import FaultManager
from chaoskit.inventory.models import Inventory
from chaoskit.report.vocabulary import slo_test_name

INV = "inventories/lab.yaml"


def drill(playbook: str, out: Path, timeout: float = 300, outputs: tuple[str, ...] = LEAN
          ) -> tuple[subprocess.CompletedProcess[str], Path]:
    """A drill as a user runs it; without its PDF and plots (`LEAN`) unless a test reads them."""
    res = subprocess.run(["chaoskit", "run", playbook, "-i", INV, "--out", str(out), *outputs], capture_output=True,
                         text=True, timeout=timeout)
    dirs = sorted(out.glob("*"))
    assert dirs, res.stdout + res.stderr
    return res, dirs[-1]


def f_detect_signal(ev: dict) -> str:
    return ev["results"]["faults"][0]["detect_signal"] or ""


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs).get("src") or "")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def kill_primary(lab: Inventory, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str],
                                                                                     Path]:
    return drill("playbooks/pg-kill-primary.yaml", tmp_path_factory.mktemp("runs"), outputs=())  # PDF, plots read


def test_kill_primary_end_to_end(kill_primary: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    res, run_dir = kill_primary
    assert res.returncode in (0, 1), res.stdout + res.stderr  # 1: an SLO missed (below: only RPO may be)
    for name in ("run.json", "events.jsonl", "timeline.csv", "report.html", "report.pdf", "summary.md", "junit.xml",
                 "methodology.md",
                 "plots/timeline.png", "plots/latency_histogram.png"):
        assert (run_dir / name).stat().st_size > 0, name
    ev = json.loads((run_dir / "run.json").read_text())
    assert ev["schema_version"] == 3 and len(ev["playbook"]["sha256"]) == 64 and len(ev["inventory"]["sha256"]) == 64
    import hashlib

    assert ev["playbook"]["sha256"] == hashlib.sha256(Path("playbooks/pg-kill-primary.yaml").read_bytes()).hexdigest()
    raw = (run_dir / "run.json").read_text()
    for secret in Path("/var/lib/chaoskit-lab/secrets").iterdir():  # references are kept, values never
        assert secret.read_text().strip() not in raw
    assert ev["ha"]["settings"]["ttl"] and ev["server"]["synchronous_commit"] and ev["ha"]["manager"] == "patroni"
    assert all(o["uncertainty_s"] < 0.05 for o in ev["clock_offsets"].values())
    (f,) = ev["results"]["faults"]
    # the DCS watch saw the old leader's lease end, after the fault; T_detect is the first reaction
    # any source stamped: that watch, or the REST poll when Patroni's view of the same etcd change
    # came back before the watch's line was read (which one stamps first is a race on a busy machine)
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    [lost, *_] = [e for e in events if e["kind"] == "manager_event" and e["source"] == "etcd-watch"
                  and e["event"] == "leader_lost"]
    assert lost["detail"] == f"leader key deleted (lease of {f['old_primary']} ended)"
    assert lost["t"] >= f["t_fault"] and f["t_detect"] <= lost["t"]
    assert (f_detect_signal(ev) == f"etcd-watch: {lost['detail']}"
            or f_detect_signal(ev).startswith(f"patroni-poll: leader {f['old_primary']} -> ")), f_detect_signal(ev)
    marks = [f[k] for k in ("t_fault", "t_detect", "t_promoted", "t_first_ok", "t_recovered")]
    assert None not in marks and marks == sorted(marks), marks
    assert f["target_host"] == f["old_primary"] != f["new_primary"]
    assert 0 < f["rto_first_client_s"] <= f["rto_all_clients_s"] < 30 and "write_gap_s" not in f
    assert set(f["phases"]) == {"detection_s", "promotion_s", "reconnect_s", "stabilisation_s"}
    assert ev["results"]["checks"]["replica_convergence"]["old_primary"]["rejoined"] is True
    assert ev["results"]["checks"]["split_brain"]["valid"] is True
    # asynchronous replication: the writes acknowledged in the last moments before the crash are
    # lost, 4 to 8 per client group in runs here, around the playbook's rpo_max_writes of 5; that
    # SLO is judged against what was measured, the others must hold, and the exit code follows
    slo = ev["results"]["slo"]
    assert slo["rto_max"]["ok"] and slo["max_error_rate_after_recovery"]["ok"]
    assert slo["rpo_max_writes"]["ok"] is (slo["rpo_max_writes"]["measured"] <= 5)
    assert ev["results"]["verdict"] is all(s["ok"] for s in slo.values())
    assert res.returncode == (0 if ev["results"]["verdict"] else 1)
    assert ev["faults_injected"][0]["revert_verified"] is True
    groups = ev["results"]["groups"]
    assert set(groups) == {"deadline", "pool"}
    assert all(0 < g["rto_first_client_s"] <= g["rto_all_clients_s"] < 30 for g in groups.values())
    # rto_max judges all clients back, the worst group's (the figure a reader is promised)
    assert slo["rto_max"]["measured"] == max(g["rto_all_clients_s"] for g in groups.values())
    assert sum(g["rpo"]["lost_acknowledged"] for g in groups.values()) == ev["results"]["rpo"]["lost_acknowledged"]
    # the run directory is sealed: every file the drill wrote is in its manifest and verifies
    listed = json.loads((run_dir / "manifest.json").read_text())["files"]
    assert {"run.json", "events.jsonl", "report.html", "history.jsonl.gz", "plots/timeline.png",
            "attestation.intoto.json"} <= set(listed)
    attestation = json.loads((run_dir / "attestation.intoto.json").read_text())
    assert attestation["predicate"]["result"] == ("PASSED" if ev["results"]["verdict"] else "FAILED")
    assert any(t.startswith("SLO all clients back <= ") for t in attestation["predicate"]["passedTests"])
    check = subprocess.run(["chaoskit", "verify", str(run_dir)], capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and "intact" in check.stdout, check.stderr
    # each member's Patroni log and PostgreSQL's stderr for the run's window, sealed, secrets not copied
    kept = {(r["host"], r["label"]): r for r in ev["logs"]}
    assert set(kept) == {(h, label) for h in ("pg1", "pg2", "pg3") for label in ("patroni", "postgres")}
    assert all(r["file"] == f"logs/{h}/{label}.log" and r["file"] in listed for (h, label), r in kept.items())
    old = f["old_primary"]
    assert "promoted self to leader" in (run_dir / "logs" / f["new_primary"] / "patroni.log").read_text()
    assert kept[(old, "postgres")]["lines"] > 0 and all(r["window_bytes"] <= 3 * 256 * 1024 for r in kept.values())
    secrets = [s.read_text().strip() for s in Path("/var/lib/chaoskit-lab/secrets").iterdir()]
    for p in (run_dir / "logs").rglob("*.log"):
        assert not any(s in p.read_text() for s in secrets), p


def test_rto_against_the_hosts_record_and_the_timeline(kill_primary: tuple[subprocess.CompletedProcess[str],
                                                                                        Path]) -> None:
    _, run_dir = kill_primary
    ev = json.loads((run_dir / "run.json").read_text())
    f = ev["results"]["faults"][0]
    # T_fault is the host's own timestamp of the kill, moved to the control clock by the measured offset
    (inj,) = ev["faults_injected"]
    assert f["t_fault"] == pytest.approx(inj["t_effect_host"] - inj["offset_s"], abs=1e-6)
    assert inj["t_sent"] <= f["t_fault"] + inj["offset_uncertainty_s"]
    # the timeline (100 ms intervals) agrees: no write completes in between, and writes resume there
    t0 = ev["t0_load_start"]
    rows = list(csv.DictReader((run_dir / "timeline.csv").open()))
    def ok_between(a: float, b: float) -> int:
        return sum(int(r["write_ok"]) for r in rows if a <= float(r["t"]) and float(r["t"]) + 0.1 <= b)
    assert ok_between(f["t_last_ok"] + 0.1, f["t_first_ok"] - 0.1) == 0
    resumed = next(float(r["t"]) for r in rows if float(r["t"]) > f["t_last_ok"] + 0.1 and int(r["write_ok"]) > 0)
    assert resumed == pytest.approx(f["t_first_ok"], abs=0.11)
    assert float(rows[0]["t_rel_s"]) == pytest.approx(float(rows[0]["t"]) - t0, abs=0.001)


def test_each_members_host_and_the_control_node_sampled_beside_the_load(
        kill_primary: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    """Every member's host (its own cgroup on the lab) and the control node (its /proc) read about
    once a second from before the load started to after it stopped: a sample a second is the
    loop's pace, so at least one per two seconds of load; CPU busy is a share of all cores."""
    _, run_dir = kill_primary
    ev = json.loads((run_dir / "run.json").read_text())
    hm = ev["host_metrics"]
    assert {h: hm[h]["source"] for h in ("pg1", "pg2", "pg3")} == {h: f"cgroup:chaoskit-lab/{h}"
                                                                   for h in ("pg1", "pg2", "pg3")}
    assert hm["control"]["source"] == "proc" and "mem_used_pct" in hm["control"]["figures"]
    rows = list(csv.DictReader((run_dir / "timeline.csv").open()))
    load_s = float(rows[-1]["t"]) - float(rows[0]["t"])
    for host, m in hm.items():
        assert m["error"] is None and m["samples"] >= load_s / 2, (host, m)
        assert 0 <= m["figures"]["cpu_busy_pct"]["mean"] <= m["figures"]["cpu_busy_pct"]["max"] <= 100
        busy = [float(r[f"cpu_busy_pct_{host}"]) for r in rows if r[f"cpu_busy_pct_{host}"] != ""]
        assert len(busy) >= len(rows) - 25 and all(0 <= b <= 100 for b in busy)  # none before the first second
    assert set(hm["pg1"]["null"]) == {"cpu_iowait_pct", "cpu_steal_pct", "load1", "mem_used_pct"}


def test_ledger_recounted_with_plain_sql_on_every_member(lab: Inventory,
                                                         kill_primary: tuple[subprocess.CompletedProcess[str],
                                                                             Path]) -> None:
    """Every member holds exactly: acknowledged - lost + indeterminate found + phantoms rows of the
    run, counted here with psycopg and plain SQL, not through chaoskit's drivers."""
    _, run_dir = kill_primary
    every_member_holds_what_was_acknowledged(lab, json.loads((run_dir / "run.json").read_text()))


def every_member_holds_what_was_acknowledged(lab: Inventory, ev: dict) -> None:
    """acknowledged - lost + indeterminate found + phantoms rows of the run on every pg member,
    counted with psycopg and plain SQL."""
    import psycopg
    from drillrun import expected_rows

    password = Path("/var/lib/chaoskit-lab/secrets/pg_superuser").read_text().strip()
    for member in lab.clusters["pg"].members:
        with psycopg.connect(host=lab.member_address(member), port=member.db_port or 5432, user="postgres",
                             password=password, dbname="postgres", connect_timeout=5) as conn:
            (count,) = conn.execute("SELECT count(*) FROM chaoskit_ledger WHERE run_id = %s",
                                    (ev["run_id"],)).fetchone()
        assert count == expected_rows(ev), (member.host, count, expected_rows(ev))


def test_report_html_parses_and_plots_are_images(kill_primary: tuple[subprocess.CompletedProcess[str],
                                                                     Path]) -> None:
    _, run_dir = kill_primary
    parser = _Collect()
    parser.feed((run_dir / "report.html").read_text())
    parser.close()
    text = " ".join(parser.text)
    assert {"html", "table", "img"} <= set(parser.tags)
    for needle in ("pg-kill-primary", "Faults and actions", "rto_max", "detection", "replica_convergence"):
        assert needle in text, needle
    assert len(parser.images) == 2 and all(src.startswith("data:image/png;base64,") for src in parser.images)
    for png in ("timeline.png", "latency_histogram.png"):
        img = mpimg.imread(run_dir / "plots" / png)
        assert img.shape[0] > 200 and img.shape[1] > 400 and img.std() > 0  # a real, non-blank picture
    junit = (run_dir / "junit.xml").read_text()
    missed = sum(not s["ok"] for s in json.loads((run_dir / "run.json").read_text())["results"]["slo"].values())
    assert f'failures="{missed}"' in junit and "SLO all clients back &lt;= 30.00 s" in junit  # only RPO may miss
    res = subprocess.run(["chaoskit", "report", str(run_dir)], capture_output=True, text=True)
    assert res.returncode == 0
    res = subprocess.run(["chaoskit", "compare", str(run_dir), str(run_dir)], capture_output=True, text=True)
    assert res.returncode == 0 and sum(run_dir.name in line for line in res.stdout.splitlines()) == 2


def test_the_report_as_a_reader_sees_it(kill_primary: tuple[subprocess.CompletedProcess[str], Path],
                                        tmp_path: Path) -> None:
    """report.html in headless Chromium at 1366 x 768: the verdict and every headline row are on
    the first screen, nothing is wider than the screen, both plots load under the report's own
    content security policy. report.pdf through poppler: A4 landscape pages, as many as its
    footer counts, the headline on page 1 and the timeline plot on page 2."""
    import pypdfium2 as pdfium
    from browser import Chromium, pdf_pages_as_png

    _, run_dir = kill_primary
    with Chromium(1366, 768) as browser:
        browser.open(run_dir / "report.html")
        seen = browser.evaluate("""(() => {
            const head = document.querySelector('table.headline');
            const rows = [...head.querySelectorAll('tr')].map(r => [r.querySelector('th').textContent,
                                                                  r.getBoundingClientRect().bottom]);
            return {h1: document.querySelector('h1').textContent, rows: rows,
                    height: window.innerHeight, width: window.innerWidth,
                    scroll_width: document.documentElement.scrollWidth,
                    images: [...document.images].map(i => i.complete && i.naturalWidth > 0)};
        })()""")
        browser.screenshot(tmp_path / "first-screen.png")
    assert (seen["width"], seen["height"]) == (1366, 768)
    assert "PASS" in seen["h1"] or "FAIL" in seen["h1"]
    labels = [label for label, _ in seen["rows"]]
    assert labels[:3] == ["verdict", "environment", "what was done"]
    assert {"RTO", "data lost", "failover", "duration", "operator", "evidence"} <= set(labels)
    assert all(bottom <= seen["height"] for _, bottom in seen["rows"]), seen["rows"]
    assert seen["scroll_width"] <= seen["width"]
    assert seen["images"] == [True, True]  # the timeline and the latency histogram, as data: URLs
    assert mpimg.imread(tmp_path / "first-screen.png").shape[:2] == (768, 1366)

    pdf = pdfium.PdfDocument(str(run_dir / "report.pdf"))
    pages = pdf_pages_as_png(run_dir / "report.pdf", tmp_path / "pdf")
    assert len(pages) == len(pdf) >= 3
    for png in pages:
        height, width = mpimg.imread(png).shape[:2]
        assert abs(width / height - 297 / 210) < 0.01  # A4 landscape
    text = [pdf[i].get_textpage().get_text_range() for i in range(2)]
    assert "what was done" in text[0] and f"page 1 / {len(pdf)}" in text[0]
    assert any(obj.type == pdfium.raw.FPDF_PAGEOBJ_IMAGE for obj in pdf[1].get_objects())
    assert "The run on one time axis" in text[1]


def test_the_dcs_gone_demotes_the_primary_and_no_write_is_taken_until_it_is_back(lab: Inventory,
                                                                                  tmp_path: Path) -> None:
    """pg-dcs-down shortened: etcd (a service of dcs1, no cluster member) stopped for 18 s, longer
    than ttl + loop_wait + retry_timeout. Without failsafe mode Patroni demotes the leader: the last
    write it acknowledged falls within that bound of the stop, it is seen read-only before etcd is
    back, and no member takes a write again before the planned end of the fault (no leader without
    the DCS). Healed: etcd runs again from its pid file. Nothing acknowledged is lost (every
    member recounted with plain SQL) and etcd's log window is kept with the members'."""
    from drillrun import run, shortened

    pb = shortened("playbooks/pg-dcs-down.yaml", tmp_path, ["8s"], "40s", ["18s"],
                   recovery_within="20s")
    res, ev, run_dir = run(pb, tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    f = ev["results"]["faults"][0]
    settings = ev["ha"]["settings"]
    bound = settings["ttl"] + settings["loop_wait"] + settings["retry_timeout"]
    assert (f["kind"], f["target_host"]) == ("stop", "dcs1")
    pid = int(Path("/var/lib/chaoskit-lab/hosts/dcs1/etcd.pid").read_text().split()[0])
    assert Path(f"/proc/{pid}/comm").read_text().strip() == "etcd"
    assert f["outage"] and f["t_last_ok"] - f["t_fault"] <= bound, (f["t_last_ok"] - f["t_fault"], bound)
    assert f["t_read_only"] is not None and f["t_read_only"] < f["t_fault"] + 18.0
    assert f["t_first_ok"] > f["t_fault"] + 18.0  # the revert is never sent before the planned end
    assert f["outcome"] in ("restarted_in_place", "failover"), f["outcome_text"]  # which member wins is a race
    if f["outcome"] == "restarted_in_place":
        assert f["outcome_text"].startswith(f"{f['primary_at_fault']} demoted by its manager at +")
    assert ev["results"]["checks"]["split_brain"]["valid"] is True
    assert ev["results"]["rpo"]["lost_acknowledged"] == 0
    every_member_holds_what_was_acknowledged(lab, ev)
    kept = {(lg["host"], lg["label"]): lg for lg in ev["logs"]}
    assert kept[("dcs1", "etcd")]["file"] == "logs/dcs1/etcd.log" and (run_dir / "logs/dcs1/etcd.log").stat().st_size


def test_the_leader_cut_from_etcd_alone_demotes_before_anyone_is_promoted(lab: Inventory, tmp_path: Path) -> None:
    """pg-dcs-partition-primary shortened: only the leader's traffic with the DCS hosts is cut
    (peers by tag), replicas and clients still reach it. It stops acknowledging writes within
    ttl + loop_wait of the cut (it demotes before its key can expire), another member is promoted
    only after that, never both writable at once; the replicas kept streaming from it until it
    shut down, so nothing acknowledged is lost."""
    from drillrun import run, shortened

    pb = shortened("playbooks/pg-dcs-partition-primary.yaml", tmp_path, ["8s"], "35s", ["20s"],
                   recovery_within="30s")
    res, ev, _ = run(pb, tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    [f] = ev["results"]["faults"]
    settings = ev["ha"]["settings"]
    assert f["kind"] == "partition" and f["target_host"] == f["primary_at_fault"]
    assert f["t_last_ok"] - f["t_fault"] <= settings["ttl"] + settings["loop_wait"]
    assert f["outcome"] == "failover" and f["t_new_primary"] >= f["t_last_ok"], f["outcome_text"]
    assert ev["results"]["checks"]["split_brain"]["valid"] is True
    assert ev["results"]["rpo"]["lost_acknowledged"] == 0


def test_with_failsafe_mode_the_primary_keeps_its_role_through_the_dcs_outage(lab: Inventory,
                                                                              tmp_path: Path) -> None:
    """pg-dcs-down-failsafe shortened: the same 18 s without etcd, with Patroni's failsafe_mode on
    for the drill. Every member still answers the leader's /failsafe call, so the primary never
    leaves its role and no other member is promoted; nothing acknowledged is lost; the setting
    was journaled, applied and is off again afterwards (read back from Patroni's /config)."""
    import urllib.request

    from drillrun import run, shortened

    pb = shortened("playbooks/pg-dcs-down-failsafe.yaml", tmp_path, ["8s"], "40s", ["18s"],
                   recovery_within="20s")
    res, ev, _ = run(pb, tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    assert ev["settings_changed"]["applied"] == {"failsafe_mode": True}
    [f] = ev["results"]["faults"]
    assert (f["kind"], f["target_host"]) == ("stop", "dcs1")
    assert f["t_left"] is None and f["new_primary"] is None, f["outcome_text"]
    assert ev["results"]["rpo"]["lost_acknowledged"] == 0
    assert ev["results"]["checks"]["split_brain"]["valid"] is True
    member = lab.clusters["pg"].members[0]
    with urllib.request.urlopen(f"http://{lab.member_address(member)}:8008/config", timeout=5) as answer:
        assert json.loads(answer.read()).get("failsafe_mode", False) is False


def test_the_new_primary_is_killed_as_soon_as_it_is_promoted(lab: Inventory, tmp_path: Path) -> None:
    """pg-kill-new-primary shortened: the leader killed at +8 s; the second step waits for the
    probe to see a member promoted and kills the primary 0.5 s later. Its fault lands on the
    member the first failover promoted, planned 0.5 s after the promotion event; both kills are
    healed (each member's Patroni runs again from its pid file) and no two members were ever
    writable primaries at once. Which member wins each race, and whether the twice-failed cluster
    converges in the window, are left to the evidence."""
    from drillrun import run, shortened

    pb = shortened("playbooks/pg-kill-new-primary.yaml", tmp_path, ["8s", None], "40s", ["25s", "15s"],
                   recovery_within="20s")
    res, ev, _ = run(pb, tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    first, second = ev["results"]["faults"]
    [trig] = ev["triggered_steps"]
    assert (trig["fired"], trig["step"], trig["event"]) == (True, 1, "promoted")
    assert trig["member"] == first["new_primary"] and trig["t_event"] >= first["t_fault"]
    assert second["target_host"] == trig["member"]
    # planned exactly 0.5 s after the event and applied no earlier; how much later (an SSH round
    # trip to stage it, more on a busy host) is the evidence's, not a bound this test can derive
    assert second["t_scheduled"] == trig["planned"] == trig["t_event"] + 0.5
    assert second["t_fault"] >= trig["planned"], (second["t_fault"], trig["planned"])
    assert ev["results"]["checks"]["split_brain"]["valid"] is True
    for host in {first["target_host"], second["target_host"]}:
        pid_file = Path(lab.processes_on(host)["patroni"].pid_file)
        pid = int(pid_file.read_text().split()[0])
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "patroni", host


def _disk_use(lab: Inventory) -> dict[str, tuple[int, int]]:
    """Per member: free bytes of its own lab filesystem, and bytes its data directory holds."""
    import os

    out = {}
    for m in lab.clusters["pg"].members:
        data = Path(m.data_dir or "")
        st = os.statvfs(data.parent)
        used = int(subprocess.run(["du", "-s", "-B1", "--", str(data)], capture_output=True, text=True,
                                  check=True).stdout.split()[0])
        out[m.host] = (st.f_bavail * st.f_frsize, used)
    return out


@pytest.mark.parametrize("playbook", ["pg-disk-full-primary", "pg-disk-full-primary-start-timeout-0"])
def test_a_full_disk_under_the_primary(lab: Inventory, tmp_path: Path, playbook: str) -> None:
    """pg-disk-full-primary (Patroni's default primary_start_timeout, 300 s) and its variant with 0,
    shortened: the primary's own filesystem left without free space for 12 s. PostgreSQL answers
    the writes that need room with its own error (SQLSTATE 53100: class resources), counted as
    failed, never as unknown: nothing was committed; or, when a new WAL segment meets the full disk
    first, it PANICs and Patroni starts it again in place. With the default no member is promoted (300 s
    is longer than the run); with 0 the setting was applied for the drill and is gone afterwards.
    Where the primary stayed, nothing acknowledged is lost. After the revert no ballast file is left
    on any member's filesystem and its free space is back: what it was before the run, less what the
    data directory grew by (one WAL segment of slack for a checkpoint between the two readings)."""
    import urllib.request

    from drillrun import run, shortened

    before = _disk_use(lab)
    pb = shortened(f"playbooks/{playbook}.yaml", tmp_path, ["8s"], "32s", ["12s"], recovery_within="20s")
    res, ev, run_dir = run(pb, tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    [f] = ev["results"]["faults"]
    assert (f["kind"], f["target_host"]) == ("disk_full", f["primary_at_fault"]) and f["t_reverted"]
    # Which write meets the full disk first is a race: a backend extending a table or an SLRU file
    # (pg_xact, pg_subtrans: "could not access status of transaction N", the disk named only in
    # its DETAIL) gets an ERROR (SQLSTATE 53100, class resources: failed, never unknown), a new WAL
    # segment makes PostgreSQL PANIC (its clients see the connection lost, Patroni starts it again).
    # One of the two, always; the server's own log (kept for the run's window) says which.
    refused = [r for r in ev["results"]["errors"]["rows"] if r["class"] == "resources"]
    assert all(r["outcome"] == "fail" for r in refused), ev["results"]["errors"]["rows"]
    primary_log = (run_dir / "logs" / f["target_host"] / "postgres.log").read_text()
    panicked = re.search(r"PANIC: .*No space left on device", primary_log) is not None
    refused_for_space = re.search(r"(ERROR|DETAIL): .*No space left on device", primary_log) is not None
    assert panicked or (refused and refused_for_space), ev["results"]["errors"]["rows"]
    if playbook == "pg-disk-full-primary":
        assert ev["ha"]["settings"].get("primary_start_timeout") in (None, 300)
        assert f["outcome"] in ("no_reaction", "restarted_in_place"), f["outcome_text"]
    else:
        assert ev["settings_changed"]["applied"] == {"primary_start_timeout": 0}
        member = lab.clusters["pg"].members[0]
        with urllib.request.urlopen(f"http://{lab.member_address(member)}:8008/config", timeout=5) as answer:
            assert json.loads(answer.read()).get("primary_start_timeout", 300) == 300
    if f["outcome"] != "failover":
        assert ev["results"]["rpo"]["lost_acknowledged"] == 0
    assert ev["results"]["checks"]["split_brain"]["valid"] is True
    after = _disk_use(lab)
    for m in lab.clusters["pg"].members:
        disk = Path(m.data_dir or "").parent
        assert not list(disk.glob(".chaoskit-ballast-*")), m.host
        (free0, used0), (free1, used1) = before[m.host], after[m.host]
        assert free1 >= free0 - max(0, used1 - used0) - 16 * 2**20, (m.host, free0, free1, used0, used1)


def test_a_full_disk_on_the_root_filesystem_is_refused_before_the_drill(lab: Inventory, tmp_path: Path) -> None:
    """pg-single keeps its data on dcs1's root filesystem (no disk of its own): preflight runs the
    disk_full check on the host and refuses the drill, naming the step, the host and why, before
    any fault is staged or the load started."""
    import yaml
    from drillrun import run, shortened

    pb = shortened("playbooks/pg-disk-full-primary.yaml", tmp_path, ["8s"], "20s", ["5s"])
    data = yaml.safe_load(pb.read_text())
    data["cluster"] = "pg-single"
    data["checks"] = ["rpo", "split_brain"]
    data["steps"][0]["fault"]["target"] = "dcs1"
    pb.write_text(yaml.safe_dump(data, sort_keys=False))
    res, ev, _ = run(pb, tmp_path, refusal=True)
    assert res.returncode != 0
    assert ev["refused"].startswith("steps[0] (disk_full) on dcs1: ") and "root filesystem" in ev["refused"]
    assert not ev.get("faults_injected") and not list(Path("/var/lib/chaoskit/faults/dcs1").glob("*.json"))


def test_primary_and_sync_standby_killed_together_the_async_replica_never_takes_over(lab: Inventory,
                                                                                    tmp_path: Path) -> None:
    """pg-kill-primary-and-sync-standby shortened: one step kills the leader and its synchronous
    standby (synchronous_mode on) at one instant, for 15 s. Both faults carry the step's planned
    instant and took effect within 1 s of each other; the step is analysed as one disturbance
    (the primary's fault, with the other listed). Patroni promotes only a member that was
    synchronous, so the third member is never seen as the primary, no write is taken before one of
    the two is started again (the planned end), and nothing acknowledged is lost."""
    from drillrun import run, shortened

    pb = shortened("playbooks/pg-kill-primary-and-sync-standby.yaml", tmp_path, ["8s"], "45s", ["15s"],
                   recovery_within="30s")
    res, ev, run_dir = run(pb, tmp_path)
    assert res.returncode in (0, 1), res.stdout[-3000:] + res.stderr[-3000:]
    one, two = ev["faults_injected"]
    assert one["t_scheduled"] == two["t_scheduled"] and abs(one["t_effect"] - two["t_effect"]) < 1.0
    [f] = ev["results"]["faults"]
    assert f["target_host"] == f["primary_at_fault"]
    [other] = f["together_with"]
    hit = {f["target_host"], other["host"]}
    [spared] = {m.host for m in lab.clusters["pg"].members} - hit
    roles = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert not [e for e in roles if e.get("kind") == "role" and e["member"] == spared and e["role"] == "primary"
                and e["t"] > f["t_fault"]]
    assert f["t_first_ok"] >= min(one["t_effect"], two["t_effect"]) + 15.0
    assert ev["results"]["rpo"]["lost_acknowledged"] == 0
    assert ev["results"]["checks"]["split_brain"]["valid"] is True


def test_sync_variant_loses_no_acknowledged_write(lab: Inventory, tmp_path: Path) -> None:
    from drillrun import shortened

    pb = shortened("playbooks/pg-kill-primary-sync.yaml", tmp_path, ["8s"], "30s", ["12s"])
    res, run_dir = drill(str(pb), tmp_path / "runs")
    ev = json.loads((run_dir / "run.json").read_text())
    assert res.returncode == 0, res.stdout + res.stderr
    rpo = ev["results"]["rpo"]
    assert rpo["lost_acknowledged"] == 0 and rpo["phantoms"] == 0 and rpo["acknowledged"] > 1000
    assert any(e.get("values") == {"synchronous_mode": True}
               for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines()))
    assert ev["ha"]["settings"]["synchronous_mode"] is False  # read before the drill; restored after it
    assert ev["settings_changed"]["previous"] == {"synchronous_mode": False}


def test_reads_through_the_replica_route_across_a_failover(lab: Inventory, tmp_path: Path) -> None:
    """pg-read-route-failover shortened: writers through the writer, readers through pg-read
    (libpq's prefer-standby). What holds in every legal run, recounted from the run's transactions
    and the writers' log on the new primary (tests/integration/staleread.py); the report has the
    table by phase."""
    from staleread import recount

    # (what it asserts needs no recovery: a busy CI machine waited up to 60 s for one)
    pb = shortened("playbooks/pg-read-route-failover.yaml", tmp_path, ["8s"], "30s", ["12s"], recovery_within="15s")
    res, run_dir = drill(str(pb), tmp_path / "runs")
    assert res.returncode in (0, 1), res.stdout + res.stderr  # a lost write (asynchronous) fails the check
    check = recount(run_dir, lab, "pg", "replica-reads")
    assert set(check["phases"]) <= {"before", "during", "after"} and check["phases"]["before"]["reads"] > 0
    assert "Reads through read routes" in (run_dir / "report.html").read_text()


def test_standby_kill_reports_its_catch_up(lab: Inventory, tmp_path: Path) -> None:
    res, ev, _ = run(shortened("playbooks/pg-kill-standby.yaml", tmp_path, ["8s"], "25s", ["6s"]), tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "no_reaction" and not f["outage"]
    c = f["catchup"]
    assert c["member"] == f["target_host"]
    assert c["t_back"] == pytest.approx(ev["faults_injected"][0]["t_reverted"])
    assert 0 < c["streaming_s"] <= c["caught_up_s"] < 30
    # it came back behind by what was written while it was away: the load kept acknowledging
    # writes on the primary, so its WAL position moved past the standby's last one (the lag the
    # primary samples after the return, and the baseline's lag, are samples: never compared here)
    assert ev["results"]["rpo"]["acknowledged"] > 0
    assert c["missed_bytes"] > 0 and c["peak_lag_bytes"] is not None


def _own_clients_retry_s() -> float:
    """How long after the writer is back one of chaoskit's deadline clients may still take to write
    again: a backoff (at most 1.5 x its cap, with jitter), a failed attempt's cap, 20 ms of
    scheduling, one connection attempt (libpq waits at least 2 s) and one op deadline."""
    from chaoskit.workload.outcomes import client_deadline
    from chaoskit.workload.spec import DRILL, LoadSpec

    spec = LoadSpec(workload="ledger", workers=1)
    return 1.5 * spec.backoff_max + spec.backoff_max + 0.02 + 2.0 + client_deadline(DRILL.op_timeout_s)


OWN_CLIENTS_RETRY_S = _own_clients_retry_s()


def _failover_beside_a_tool(name: str, tmp_path: Path, at: str, duration: str
                            ) -> tuple[subprocess.CompletedProcess[str], Path, dict, dict]:
    """A shipped leader-kill drill with a tool group, shortened (the kill lasting 12 s): its result,
    run directory, run.json and its one fault, which was a failover."""
    from drillrun import shortened

    pb = shortened(f"playbooks/{name}.yaml", tmp_path, [at], duration, ["12s"])
    res, run_dir = drill(str(pb), tmp_path / "runs")
    assert res.returncode in (0, 1), res.stdout + res.stderr
    ev = json.loads((run_dir / "run.json").read_text())
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover", f
    return res, run_dir, ev, f


def test_pgbench_beside_chaoskits_clients_through_one_failover(lab: Inventory, tmp_path: Path) -> None:
    """pgbench as a client group (one pgbench per client) and chaoskit's own clients through the
    same leader kill: every pgbench client was connected to the killed primary, so each was
    aborted, started again and wrote again; its RTO per client is recounted here from pgbench's
    own logs kept in the run directory, and its RPO is null with the reason."""
    res, run_dir, ev, f = _failover_beside_a_tool("pg-kill-primary-pgbench", tmp_path, "8s", "30s")
    groups = ev["results"]["groups"]
    pg, own = groups["pgbench"], groups["chaoskit"]
    assert pg["tool"] == "pgbench" and pg["rpo"] is None and "does not say" in pg["rpo_null_reason"]
    cpu = ev["load"]["client_cpu"]  # the load's own processes, pgbench's included, start to stop
    assert 0 < cpu["client_cpu_cores"] <= os.cpu_count() and isinstance(cpu["client_saturated"], bool)
    assert own["rpo"]["acknowledged"] > 0 and ev["results"]["slo"]["rto_max"]["ok"]
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    aborted = {e["worker"]: e["t"] for e in events if e["kind"] == "tool_client_aborted"}
    back = {e["worker"] for e in events if e["kind"] == "tool_client_back"}
    assert set(aborted) == back == set(pg["workers"]), (aborted, back)
    restarts = pg["tool_restarts"]
    assert restarts["aborted"] == restarts["back"] == 4 and restarts["killed_at_stop"] == 0
    assert f"pgbench gave up 4 client(s), 4 back after being started again ({restarts['failed_starts']} starts" \
        in res.stdout
    raw = run_dir / "tools" / "pgbench"
    for w in pg["workers"]:
        ends = [int(x[4]) + int(x[5]) / 1e6 for p in raw.glob(f"client-{w}.[0-9]*")
                for x in (line.split() for line in p.read_text().splitlines())]
        first_after = min(t for t in ends if t > aborted[w])
        assert pg["faults"][0]["per_client_rto_s"][str(w)] == pytest.approx(first_after - f["t_fault"], abs=1e-5)
    # one failover, two kinds of client: each is back within its retry interval of the writer being
    # there again (pgbench is started again as chaoskit's clients retry: the same bound)
    assert abs(pg["rto_first_client_s"] - own["rto_first_client_s"]) <= OWN_CLIENTS_RETRY_S
    assert pg["rto_all_clients_s"] is not None and own["rto_all_clients_s"] is not None
    assert "client group pgbench (pgbench, deadline connections, 4 clients)" in res.stdout


def test_jmeter_beside_chaoskits_clients_and_its_jtl_imported_again(lab: Inventory, tmp_path: Path) -> None:
    """A JMeter plan (Debian's JMeter 2.13, the shipped stepping plan, 6 threads) as a client group
    beside chaoskit's own clients through one leader kill. Its per-thread RTO is recounted here from
    JMeter's own JTL kept in the run directory (threads numbered in the order they first appear);
    `chaoskit import jtl` of that file against the run's own fault events gives the same outage
    window again; JMeter (its script and JVM) is gone after the load's stop."""
    from chaoskit.workload.engines.jmeter import JtlReader

    res, run_dir, ev, f = _failover_beside_a_tool("pg-kill-primary-jmeter", tmp_path, "10s", "28s")
    jm, own = ev["results"]["groups"]["jmeter"], ev["results"]["groups"]["chaoskit"]
    assert jm["tool"] == "jmeter" and jm["rpo"] is None and "does not say" in jm["rpo_null_reason"]
    assert own["rpo"]["acknowledged"] > 0 and jm["workers"] == [5, 6, 7, 8, 9, 10]
    jtl = run_dir / "tools" / "jmeter" / "results.jtl"
    samples = JtlReader(jtl).feed(jtl.read_bytes(), final=True)
    threads: dict[str, int] = {}
    for s in samples:
        threads.setdefault(s.thread, 5 + len(threads))
    assert len(threads) == 6
    per_client = jm["faults"][0]["per_client_rto_s"]
    before_back: dict[str, list[tuple[float, float, str]]] = {}  # the last samples before each thread was back
    for thread, w in threads.items():
        mine = [s for s in samples if s.thread == thread]
        first_fail = next(i for i, s in enumerate(mine) if not s.ok and s.t_end >= f["t_open"])
        i_back, back = next((i, s) for i, s in enumerate(mine) if i >= first_fail and s.ok)
        assert per_client[str(w)] == pytest.approx(back.t_end - f["t_fault"], abs=1e-6), thread
        before_back[thread] = [(round(s.t_start - f["t_fault"], 3), round(s.t_end - f["t_fault"], 3), s.code)
                               for s in mine[max(0, i_back - 3):i_back + 1]]
    # one failover, two kinds of client, each back within its own retry interval of the writer
    # being there: chaoskit's, and JMeter's plan: the attempt in flight when the writer came back
    # (a connect, ended by loginTimeout: 1 s for each of the 3 endpoints, or a statement, ended by
    # socketTimeout=2 s), its 20 ms timer, one connect, one statement
    login, statement = 3 * 1.0, 2.0
    jmeter_retry = max(login, statement) + 0.020 + login + statement
    assert abs(jm["rto_first_client_s"] - own["rto_first_client_s"]) <= max(OWN_CLIENTS_RETRY_S, jmeter_retry), (
        {k: f.get(k) for k in ("t_fault", "t_detect", "t_promoted", "t_open", "t_close")}, per_client,
        own["faults"][0]["per_client_rto_s"], jm["rto_first_client_s"], own["rto_first_client_s"], before_back)
    assert jm["tool_restarts"]["aborted"] == 0 and not [
        e for e in map(json.loads, (run_dir / "events.jsonl").read_text().splitlines())
        if e["kind"] in ("tool_ended", "tool_samples_dropped")]
    assert "client group jmeter (jmeter, 6 clients)" in res.stdout
    left = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cwd(p) == jtl.parent]
    assert not left, left
    imported = subprocess.run(["chaoskit", "import", "jtl", str(jtl), "--faults", str(run_dir / "events.jsonl"),
                               "--out", str(tmp_path / "imported")], capture_output=True, text=True, timeout=120)
    if min(s.t_start for s in samples) > f["t_fault"]:
        # JMeter's JVM took longer to start than the drill to its fault (3.5 s idle here, over 10 s
        # beside the other CI lane): its file does not hold the fault's instant, and the import says so
        assert imported.returncode == 2, imported.stdout + imported.stderr
        assert "no fault instant falls within the file's samples" in imported.stderr
        return
    assert imported.returncode == 0, imported.stderr
    (imp_dir,) = (tmp_path / "imported").iterdir()
    (fi,) = json.loads((imp_dir / "run.json").read_text())["results"]["faults"]
    assert fi["t_fault"] == f["t_fault"]
    assert {str(int(w) + 4): v for w, v in fi["per_client_rto_s"].items()} == pytest.approx(per_client, abs=1e-6)
    assert fi["rto_first_client_s"] == pytest.approx(jm["rto_first_client_s"], abs=1e-6)
    assert fi["rto_all_clients_s"] == pytest.approx(jm["rto_all_clients_s"], abs=1e-6)


def _cwd(proc: Path) -> Path | None:
    try:
        return Path(os.readlink(proc / "cwd"))
    except OSError:
        return None


def test_mariadb_crash_and_restart_without_a_manager(lab: Inventory, tmp_path: Path) -> None:
    from drillrun import shortened

    pb = shortened("playbooks/mariadb-crash-primary.yaml", tmp_path, ["8s"], "25s")  # the crash's 5 s kept
    res, run_dir = drill(str(pb), tmp_path / "runs")
    assert res.returncode == 0, res.stdout + res.stderr
    ev = json.loads((run_dir / "run.json").read_text())
    (fault,) = ev["results"]["faults"]
    # the same node came back (the probe's view of the roles around the fault may be missing: checked below)
    assert fault["old_primary"] in (None, "my1") and fault["new_primary"] in (None, "my1")
    assert fault["t_detect"] is None and any("no HA manager in this cluster" in n for n in fault["notes"])
    # down for the 5 s of the fault, then restart + InnoDB recovery
    assert 5.0 <= fault["rto_first_client_s"] <= 12, fault
    rpo = ev["results"]["rpo"]
    assert rpo["lost_acknowledged"] == 0 and rpo["phantoms"] == 0 and rpo["acknowledged"] > 1000
    conv = ev["results"]["checks"]["replica_convergence"]
    assert conv["valid"] is True and set(conv["members"]) == {"my1", "my2"}
    assert conv["old_primary"]["host"] == "my1" and conv["old_primary"]["role_now"] == "primary"
    assert conv["old_primary"]["rewind"].startswith("not needed")
    # every profile through PyMySQL: each group was cut off for the crash and lost nothing
    groups = ev["results"]["groups"]
    assert {n: g["profile"] for n, g in groups.items()} == {"deadline": "deadline", "pool": "pool",
                                                             "per-op": "per-op"}
    for name, g in groups.items():
        assert 5.0 <= g["rto_first_client_s"] <= g["rto_all_clients_s"] <= 15, (name, g)
        assert g["rpo"]["lost_acknowledged"] == 0 and g["rpo"]["acknowledged"] > 100, name


def test_a_leader_crash_under_serializable_list_append_is_judged(lab: Inventory, tmp_path: Path) -> None:
    """pg-kill-primary-list-append shortened (its read-committed twin differs only in the level:
    tests/unit/test_list_append_workload.py): Patroni fails over under list-append transactions
    at serializable. Judged against PostgreSQL's serializable, and what holds in every legal run,
    read from the lists on the new primary (tests/integration/listappend.py; asynchronous
    replication may lose acknowledged appends, which the check then names)."""
    from drillrun import shortened
    from listappend import drilled

    # (serializable transactions' throughput after the failover comes in bursts on this 2-core lab
    # while the old primary rejoins: the recovery bound is kept short, the judgement needs none)
    pb = shortened("playbooks/pg-kill-primary-list-append.yaml", tmp_path, ["8s"], "30s", ["12s"],
                   recovery_within="15s")
    ev, check, _ = drilled(lab, "pg", pb, tmp_path, "PostgreSQL serializable", "serializable", nothing_lost=False)
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover", f.get("outcome_text")
    assert check["ok"] > 0 and check["transactions"] == check["ok"] + check["failed"] + check["indeterminate"]


def test_a_mariadb_crash_under_list_append_loses_no_append(lab: Inventory, tmp_path: Path) -> None:
    """mariadb-list-append shortened (the crash's 5 s kept): the same node comes back after InnoDB's
    crash recovery with every acknowledged append (durable commits), judged for what InnoDB's
    repeatable read promises (tests/integration/listappend.py)."""
    from drillrun import shortened
    from listappend import drilled

    pb = shortened("playbooks/mariadb-list-append.yaml", tmp_path, ["8s"], "25s")
    ev, _, _ = drilled(lab, "mariadb", pb, tmp_path, "InnoDB repeatable read", "read-committed", nothing_lost=True)
    (f,) = ev["results"]["faults"]
    assert f["new_primary"] in (None, "my1") and f["rto_first_client_s"] >= 5.0, f


def test_your_own_sql_through_a_failover_keeps_every_acknowledged_order(lab: Inventory, tmp_path: Path) -> None:
    """pg-kill-primary-sql shortened: the leader killed under the shop's own SQL. Its orders are
    the keyed writes: what the user's table holds on every member, recounted with plain SQL, is
    what RPO says (acknowledged - lost + indeterminate found + phantoms); the lookups are reads."""
    import psycopg
    from drillrun import expected_rows, shortened

    src = Path("playbooks/sql/shop-orders.pg.sql").resolve()
    pb = shortened("playbooks/pg-kill-primary-sql.yaml", tmp_path, ["8s"], "30s", ["12s"])
    res, run_dir = drill(str(pb), tmp_path / "runs")
    assert res.returncode in (0, 1), res.stdout + res.stderr
    ev = json.loads((run_dir / "run.json").read_text())
    (f,) = ev["results"]["faults"]
    assert f["outcome"] == "failover", f
    rpo = ev["results"]["rpo"]
    assert rpo["acknowledged"] > 0 and rpo["phantoms"] == 0
    rows = list(csv.DictReader((run_dir / "timeline.csv").open()))
    assert sum(int(r["write_ok"]) for r in rows) == rpo["acknowledged"]  # every write is an order, keyed
    assert sum(int(r["read_ok"]) for r in rows) > 0
    assert (run_dir / "workload" / src.name).read_text() == src.read_text()
    import hashlib

    assert ev["load"]["workload"] == "sql" and ev["load"]["sql_file"]["sha256"] == \
        hashlib.sha256(src.read_bytes()).hexdigest()
    password = Path("/var/lib/chaoskit-lab/secrets/pg_superuser").read_text().strip()
    for member in lab.clusters["pg"].members:
        with psycopg.connect(host=lab.member_address(member), port=member.db_port or 5432, user="postgres",
                             password=password, dbname="postgres", connect_timeout=5) as conn:
            (count,) = conn.execute("SELECT count(*) FROM shop_orders WHERE run_id = %s", (ev["run_id"],)).fetchone()
        assert count == expected_rows(ev), (member.host, count, expected_rows(ev))


def test_drill_finds_lost_writes_and_fails_rpo(lab: Inventory, tmp_path: Path) -> None:
    """Async replication, leader cut from etcd and peers while clients still reach it: it keeps
    acknowledging writes until Patroni demotes it, and they are gone after the failover. With a
    zero-loss RPO SLO the drill must find that and fail: the toolkit doing its job. Its RTO bound
    of 100 ms fails too: junit.xml fails exactly what run.json failed."""
    pb = tmp_path / "strict-partition.yaml"
    pb.write_text(Path("playbooks/pg-partition-primary.yaml").read_text()
                  .replace("name: pg-partition-primary", "name: pg-partition-primary-rpo0")
                  .replace("slo: {rto_max: 30s,", "slo: {rto_max: 100ms, rpo_max_writes: 0,"))
    res, run_dir = drill(str(shortened(str(pb), tmp_path, ["8s"], "40s")), tmp_path / "runs")
    ev = json.loads((run_dir / "run.json").read_text())
    assert res.returncode == 1, res.stdout + res.stderr
    assert ev["results"]["slo"]["rto_max"]["ok"] is False and ev["results"]["slo"]["rto_max"]["measured"] > 0.1
    suite = ET.parse(run_dir / "junit.xml").getroot()
    failed = {tc.get("name") for tc in suite.iter("testcase") if tc.find("failure") is not None}
    expected = {slo_test_name(k, v) for k, v in ev["results"]["slo"].items() if v["ok"] is not True} | \
        {f"check {k}" for k, v in ev["results"]["checks"].items() if v.get("valid") is not True}
    assert any(n.startswith("SLO all clients back <= ") for n in failed)
    assert failed == expected and suite.get("failures") == str(len(expected))
    # every worker's results reached the controller (else the rows they wrote are undelivered)
    said = [line for line in (run_dir / "events.jsonl").read_text().splitlines() if '"kind": "load_' in line]
    assert "undelivered" not in ev["load"] and not ev["load"].get("late_batches"), (ev["load"], said)
    rpo = ev["results"]["rpo"]
    assert rpo["lost_acknowledged"] > 0 and rpo["phantoms"] == 0 and rpo["undelivered"] == 0, (rpo, said)
    slo = ev["results"]["slo"]["rpo_max_writes"]
    by_group = {n: g["rpo"]["lost_acknowledged"] for n, g in ev["results"]["groups"].items()}
    assert sum(by_group.values()) == rpo["lost_acknowledged"]  # the groups split the totals' workers
    assert slo == {"target": 0, "measured": max(by_group.values()), "ok": False, "by_group": by_group}
    assert "acknowledged writes lost" in (run_dir / "summary.md").read_text()


def test_a_pool_client_suffers_what_careful_clients_do_not_see(lab: Inventory, tmp_path: Path) -> None:
    """The leader frozen for 20 s (Debian's Patroni 3.0.2): `pool` clients wait the freeze out and
    are acknowledged when it wakes up (RTO >= 20 s), where `deadline` clients moved to the new
    leader. Which leader survives the wake-up is a race: either the pool's late writes on the old
    leader or the deadline clients' writes on the new one are discarded. Either way the drill
    finds the loss, in the group that suffered it, acknowledged on a node that is not the writer
    now, and fails its RPO SLO. history.jsonl gives the same lost writes and per-group RTO,
    recomputed here with plain json."""
    res, run_dir = drill(str(shortened("playbooks/pg-pause-primary.yaml", tmp_path, ["8s"], "40s")), tmp_path / "runs")
    ev = json.loads((run_dir / "run.json").read_text())
    groups = ev["results"]["groups"]
    assert set(groups) == {"deadline", "pool"}, groups.keys()
    pool, careful = groups["pool"], groups["deadline"]
    print("pause figures:", {n: (g["rto_all_clients_s"], g["rpo"]["lost_acknowledged"], g["rpo"]["text"])
                             for n, g in groups.items()})
    assert pool["rto_first_client_s"] >= 19.5 and careful["rto_all_clients_s"] < pool["rto_first_client_s"]
    lost = {n: g["rpo"]["lost_acknowledged"] for n, g in groups.items()}
    assert sum(lost.values()) == ev["results"]["rpo"]["lost_acknowledged"] > 0
    assert res.returncode == 1 and ev["results"]["slo"]["rpo_max_writes"] == {
        "target": 0, "measured": max(lost.values()), "ok": False, "by_group": lost}
    members = ev["results"]["checks"]["replica_convergence"]["members"]
    writer = next(m for m, d in members.items() if d.get("role") == "primary")
    for name, g in groups.items():
        assert writer not in g["rpo"]["lost_by_node"], (name, writer, g["rpo"]["lost_by_node"])
    with gzip.open(run_dir / "history.jsonl.gz", "rt") as fh:  # as a reader without chaoskit would
        lines = [json.loads(x) for x in fh]
    header, ops = lines[0], lines[1:]
    assert header["format"] == "chaoskit-history/1" and header["dropped"] == 0
    fault = header["faults"][0]
    t_fault, t_open, stall = fault["t_fault"], fault["t_open"], header["stall_s"]
    lo, hi = t_fault - header["window_s"], t_fault + header["window_s"]
    for name, g in groups.items():
        mine = [o for o in ops if o["group"] == name]
        lost = {(o["worker"], o["seq"]) for o in mine if o["outcome"] == "ok" and o.get("found") is False}
        window = g["rpo"]["lost_ack_window"]
        if window and lo <= window[0] and window[1] <= hi:  # every lost write lies inside the history
            assert len(lost) == g["rpo"]["lost_acknowledged"], name
        ends = []  # the reader's algorithm (methodology, "Op history"): each worker's first outage
        for w in g["workers"]:
            gaps, start = [], None
            for o in (o for o in mine if o["worker"] == w):
                if o["outcome"] != "ok":
                    start = o["t_done"] if start is None else start
                elif start is not None:
                    gaps.append((start, o["t_done"]))
                    start = None
                elif o["t_done"] - o["t_invoke"] > stall:
                    gaps.append((o["t_invoke"] + stall, o["t_done"]))
            first = next((gap for gap in gaps if gap[0] >= t_open), None)
            if first is not None:
                ends.append(first[1])
        first = g["faults"][0]
        if first["rto_first_client_s"] and t_fault + first["rto_first_client_s"] <= hi:
            assert min(ends) - t_fault == pytest.approx(first["rto_first_client_s"], abs=1e-5), name
        if first["rto_all_clients_s"] and t_fault + first["rto_all_clients_s"] <= hi:
            assert max(ends) - t_fault == pytest.approx(first["rto_all_clients_s"], abs=1e-5), name


def test_lost_updates_are_found_and_recounted_with_plain_sql(lab: Inventory, tmp_path: Path) -> None:
    """The isolated leader's acknowledged increments are gone after the failover: rows whose
    version is below their acknowledged increments. The sum of every row's value, read here with
    plain SQL, must lie between (acknowledged - lost) and (acknowledged - lost + indeterminate)
    above the sum before the load."""
    import psycopg
    from drillrun import shortened

    pb = shortened("playbooks/pg-partition-primary-updates.yaml", tmp_path, ["8s"], "38s")  # its 20 s kept
    res, run_dir = drill(str(pb), tmp_path / "runs")
    ev = json.loads((run_dir / "run.json").read_text())
    rpo = ev["results"]["rpo"]
    print("lost updates:", rpo["text"], rpo["acknowledged"], rpo["indeterminate"])
    assert rpo["workload"] == "update" and rpo["phantoms"] == 0, rpo
    assert rpo["lost_acknowledged"] > 0 and res.returncode == 1
    assert ev["results"]["slo"]["rpo_max_writes"]["measured"] == rpo["lost_acknowledged"]
    pg = lab.clusters["pg"]
    password = Path("/var/lib/chaoskit-lab/secrets/pg_superuser").read_text().strip()
    with psycopg.connect(host=",".join(lab.member_address(m) for m in pg.members),
                         port=",".join(str(m.db_port or 5432) for m in pg.members), user="postgres",
                         password=password, dbname="postgres", target_session_attrs="read-write",
                         connect_timeout=5) as conn:
        total = conn.execute("SELECT COALESCE(SUM(value), 0) FROM chaoskit_kv").fetchone()[0]
    assert total == rpo["sum_after"]
    grown = rpo["sum_after"] - rpo["sum_before"]
    base = rpo["acknowledged"] - rpo["lost_acknowledged"]
    assert base <= grown <= base + rpo["indeterminate"], (grown, base, rpo["indeterminate"])


def test_frozen_patroni_is_reported_as_split_brain(lab: Inventory, tmp_path: Path) -> None:
    """Patroni 3.0.2 frozen while its PostgreSQL runs: a replica is promoted and the old primary is
    still writable (which one survives the wake-up is a race): the drill must fail on split-brain."""
    # (its judgement needs no recovery: on a busy CI machine a 60 s wait for it was most of the test)
    pb = shortened("playbooks/pg-pause-patroni.yaml", tmp_path, ["8s"], "40s", recovery_within="20s")
    res, run_dir = drill(str(pb), tmp_path / "runs")
    ev = json.loads((run_dir / "run.json").read_text())
    assert res.returncode == 1, res.stdout + res.stderr
    sb = ev["results"]["checks"]["split_brain"]
    assert sb["valid"] is False and len(sb["overlaps"][0]["members"]) == 2
    lost = ev["results"]["rpo"]["lost_acknowledged"]
    assert ev["results"]["slo"]["rpo_max_writes"]["ok"] is (lost == 0)  # loss, when it happens, is reported


def test_ctrl_c_heals_every_fault(lab: Inventory, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    # started as a background job of a non-interactive shell starts it (CI, nohup scripts): with
    # SIGINT ignored. Ctrl-C must abort and heal all the same (it ran to its end with exit 0 before).
    proc = subprocess.Popen(["chaoskit", "run", "playbooks/pg-partition-primary.yaml", "-i", INV, "--out", str(out),
                             *LEAN], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    fm = FaultManager(lab)
    # the journals of this cluster's hosts only: another session's drills (`.ci/run`) journal theirs
    members = [m.host for m in lab.clusters["pg"].members]
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            entries = [e for es in fm.journaled(members).values() if isinstance(es, list) for e in es]
            if entries:
                break
            time.sleep(0.3)
        assert entries, "the partition was never injected"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 3, err
        assert [e for es in fm.journaled(members).values() if isinstance(es, list) for e in es] == []
        assert "CK" not in fm.pool.get(entries[0]["host"]).shell("iptables -S").stdout
        ev = json.loads((sorted(out.glob("*"))[-1] / "run.json").read_text())
        assert ev["aborted"] and ev["heal"]["not_verified"] == []
    finally:
        if proc.poll() is None:
            proc.kill()
        fm.close()


@pytest.mark.parametrize(("mutation", "message"), [
    (("cluster: pg", "cluster: nope"), "cluster: unknown cluster 'nope'"),
    (("at: 12s", "at: 5s"), "inside the baseline window"),
    (("processes: [patroni, postgres]", "processes: [patroni, mysqld]"), "no member of pg has a process 'mysqld'"),
    (("workload: ledger", "workload: nosuch"), "unknown workload"),
    (("duration: 40s", "duration: forty"), "duration"),
])
def test_bad_playbook_is_refused_before_touching_anything(lab: Inventory, tmp_path: Path, mutation: tuple[str, str],
                                                          message: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(Path("playbooks/pg-kill-primary.yaml").read_text().replace(*mutation))
    for cmd in (["validate", str(bad), "-i", INV], ["run", str(bad), "-i", INV, "--out", str(tmp_path / "r")]):
        res = subprocess.run(["chaoskit", *cmd], capture_output=True, text=True, timeout=60)
        assert res.returncode == 2, res.stdout + res.stderr
        assert message in res.stderr and str(bad) in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_client_link_cut_and_restored(lab: Inventory, tmp_path: Path) -> None:
    import glob

    links_before = set(glob.glob("/tmp/chaoskit-link-*"))
    (tmp_path / "pb").mkdir()
    pb = shortened("playbooks/pg-client-link-down.yaml", tmp_path / "pb", ["8s"], "24s")
    runs = tmp_path / "runs"
    proc = subprocess.Popen(["chaoskit", "run", str(pb), "-i", INV, "--out", str(runs), *LEAN],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    (run_dir,) = sorted(runs.glob("*"))
    ev = json.loads((run_dir / "run.json").read_text())
    (fault,) = ev["results"]["faults"]
    assert 5.0 <= fault["rto_first_client_s"] <= 6.5, fault  # the 5 s the link was down, then a reconnect
    assert fault["t_detect"] is None  # no failover: the database never noticed
    assert fault["new_primary"] in (None, fault["old_primary"])  # the same writer throughout
    rpo = ev["results"]["rpo"]
    assert rpo["valid"] is True and rpo["lost_acknowledged"] == 0 and rpo["phantoms"] == 0
    (injected,) = ev["faults_injected"]
    assert injected["host"] == "client" and injected["revert_verified"] is True
    # the relays ended with the drill, and nothing of them is left on this machine
    assert set(glob.glob("/tmp/chaoskit-link-*")) == links_before
    marker = f"--parent-pid\0{proc.pid}\0".encode()
    assert not [p for p in Path("/proc").glob("[0-9]*") if _cmdline(p).find(marker) >= 0]


def _cmdline(proc_dir: Path) -> bytes:
    try:
        return (proc_dir / "cmdline").read_bytes()
    except OSError:
        return b""


