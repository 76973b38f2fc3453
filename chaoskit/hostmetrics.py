"""Host metrics: every database host's (and the control node's) CPU, load, memory, disk and network,
read once a second during a run over the host's SSH connection, with no agent on the host.

Why: a knee in a ladder or a slow failover is often the host, not the database (seed 002's knee
was CPU; seed 003's was I/O). With the figures on the run's clock beside the throughput, the
evidence shows which host was busy when, and a `stress` fault shows on the host it ran on.

How: the host runs one fixed reading loop (`SCRIPT`, its only inputs are two validated words in
argument position) that prints one line of raw counters per second; each line is stamped with the
host's own clock as it is read (`chaoskit.ha.hoststream.stamped`) and put on the control clock by
the host's measured offset. A figure is a rate between two consecutive lines over the host-clock
time between them, so SSH delay moves nothing.

Sources (the inventory's `metrics:` of a host):
- `proc`: the machine's /proc. CPU busy / iowait / steal as a share of all cores' time
  (`/proc/stat`), the 1-minute load, memory in use (MemTotal - MemAvailable), disk bytes read and
  written over whole disks (`/proc/diskstats`, partitions and device-mapper not counted twice),
  network bytes over every interface but loopback (`/proc/net/dev`).
- `cgroup`: hosts that share one kernel (the lab's namespaces) have the same /proc. CPU then comes
  from the host's cgroup (`cpuacct.usage`, nanoseconds of CPU used by its processes, as a share of
  all cores' time), block I/O from `blkio.throttle.io_service_bytes_recursive`, network from the
  host's own network namespace; load, memory, iowait and steal are the shared kernel's and stay
  null with that reason.
"""

from __future__ import annotations

import os
import re
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaoskit.inventory.models import Host, Inventory
from chaoskit.recorder import step_values

# one line of raw counters per second; `$1` is the source (proc|cgroup), `$2` the cgroup path
SCRIPT = r"""
mode=$1 cg=$2
n=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1)
net() {
  awk 'NR > 2 { sub(/:/, " "); if ($1 != "lo") { r += $2; t += $10 } }
       END { print r + 0, t + 0 }' /proc/net/dev
}
while :; do
  if [ "$mode" = cgroup ]; then
    u=$(cat "/sys/fs/cgroup/cpuacct/$cg/cpuacct.usage" 2>/dev/null) || u=-
    io=/sys/fs/cgroup/blkio/$cg/blkio.throttle.io_service_bytes_recursive
    if [ -r "$io" ]; then
      io=$(awk '$2 == "Read" { r += $3 } $2 == "Write" { w += $3 } END { print r + 0, w + 0 }' "$io")
    else io="- -"; fi
    echo "cgroup $n ${u:--} $io $(net)"
  else
    echo "proc $n $(awk '
      FILENAME == "/proc/stat" && $1 == "cpu" {
        c = $2 " " $3 " " $4 " " $5 " " $6 " " $7 " " $8 " " ($9 == "" ? 0 : $9) }
      FILENAME == "/proc/loadavg" { l = $1 }
      FILENAME == "/proc/meminfo" && $1 == "MemTotal:" { mt = $2 }
      FILENAME == "/proc/meminfo" && $1 == "MemAvailable:" { ma = $2 }
      FILENAME == "/proc/diskstats" &&
        $3 ~ /^(sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+|nvme[0-9]+n[0-9]+|mmcblk[0-9]+)$/ { rs += $6; ws += $10 }
      END { print c, l, mt + 0, ma + 0, rs + 0, ws + 0 }
    ' /proc/stat /proc/loadavg /proc/meminfo /proc/diskstats) $(net)"
  fi
  sleep 1
done
"""

# (figure, unit, what it is): the timeline's columns are `<figure>_<host>`
FIGURES: tuple[tuple[str, str, str], ...] = (
    ("cpu_busy_pct", "%", "CPU time busy, as a share of all the host's cores (100 = every core busy)"),
    ("cpu_iowait_pct", "%", "CPU time idle waiting for I/O, share of all cores"),
    ("cpu_steal_pct", "%", "CPU time taken by the hypervisor, share of all cores"),
    ("load1", "", "1-minute load average"),
    ("mem_used_pct", "%", "memory in use: (MemTotal - MemAvailable) / MemTotal"),
    ("disk_read_Bps", "B/s", "bytes read from whole disks per second"),
    ("disk_write_Bps", "B/s", "bytes written to whole disks per second"),
    ("net_rx_Bps", "B/s", "bytes received per second, every interface but loopback"),
    ("net_tx_Bps", "B/s", "bytes sent per second, every interface but loopback"),
)
FIGURE_NAMES = tuple(f for f, _, _ in FIGURES)
HOST_CPU_PREFIX = "cpu_busy_pct_"  # + host: an experiment cell's (and the timeline's) CPU busy % of that host
SHARED_KERNEL = ("cpu_iowait_pct", "cpu_steal_pct", "load1", "mem_used_pct")
SHARED_KERNEL_WHY = "the host shares its kernel (cgroup source): the kernel's figure is not this host's"
CONTROL = "control"  # the control node's name in the columns (`control_node` if a host has that name)
SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's own size


@dataclass(frozen=True)
class Counters:
    """One line of the reading loop: raw, cumulative counters at host time `t_host`."""

    t: float  # control clock
    t_host: float
    source: str  # proc | cgroup
    cores: int
    cpu_ticks: tuple[int, ...] | None = None  # proc: user nice system idle iowait irq softirq steal
    cpu_ns: int | None = None  # cgroup: cpuacct.usage
    load1: float | None = None
    mem_total_kb: int | None = None
    mem_available_kb: int | None = None
    disk_read_bytes: int | None = None
    disk_write_bytes: int | None = None
    net_rx_bytes: int | None = None
    net_tx_bytes: int | None = None


def _int(word: str) -> int | None:
    return int(word) if word.isdigit() else None


def parse_line(t: float, t_host: float, line: str) -> Counters | None:
    """A reading-loop line as counters; None for a line that is not one (a warning on stderr)."""
    w = line.split()
    try:
        if len(w) == 7 and w[0] == "cgroup":
            return Counters(t, t_host, "cgroup", int(w[1]), cpu_ns=_int(w[2]), disk_read_bytes=_int(w[3]),
                            disk_write_bytes=_int(w[4]), net_rx_bytes=_int(w[5]), net_tx_bytes=_int(w[6]))
        if len(w) == 17 and w[0] == "proc":
            sectors = (_int(w[13]), _int(w[14]))
            return Counters(t, t_host, "proc", int(w[1]), cpu_ticks=tuple(int(x) for x in w[2:10]),
                            load1=float(w[10]), mem_total_kb=_int(w[11]), mem_available_kb=_int(w[12]),
                            disk_read_bytes=None if sectors[0] is None else sectors[0] * SECTOR,
                            disk_write_bytes=None if sectors[1] is None else sectors[1] * SECTOR,
                            net_rx_bytes=_int(w[15]), net_tx_bytes=_int(w[16]))
    except ValueError:
        return None
    return None


def _rate(a: int | None, b: int | None, dt: float) -> float | None:
    """Per second between two cumulative counters; None when one is missing or it went back (the
    counter was reset: a cgroup made again, an interface gone)."""
    if a is None or b is None or b < a:
        return None
    return (b - a) / dt


def figures(prev: Counters, cur: Counters) -> dict[str, float | None]:
    """The figures of the second between two consecutive lines."""
    dt = cur.t_host - prev.t_host
    out: dict[str, float | None] = dict.fromkeys(FIGURE_NAMES)
    if dt <= 0:
        return out
    if cur.cpu_ticks is not None and prev.cpu_ticks is not None:
        d = [b - a for a, b in zip(prev.cpu_ticks, cur.cpu_ticks, strict=True)]
        total = sum(d)
        if total > 0 and min(d) >= 0:
            idle, iowait, steal = d[3], d[4], d[7]
            out["cpu_busy_pct"] = 100.0 * (total - idle - iowait) / total
            out["cpu_iowait_pct"] = 100.0 * iowait / total
            out["cpu_steal_pct"] = 100.0 * steal / total
    elif (used := _rate(prev.cpu_ns, cur.cpu_ns, dt)) is not None:
        out["cpu_busy_pct"] = 100.0 * used / 1e9 / cur.cores
    out["load1"] = cur.load1
    if cur.mem_total_kb and cur.mem_available_kb is not None:
        out["mem_used_pct"] = 100.0 * (cur.mem_total_kb - cur.mem_available_kb) / cur.mem_total_kb
    out["disk_read_Bps"] = _rate(prev.disk_read_bytes, cur.disk_read_bytes, dt)
    out["disk_write_Bps"] = _rate(prev.disk_write_bytes, cur.disk_write_bytes, dt)
    out["net_rx_Bps"] = _rate(prev.net_rx_bytes, cur.net_rx_bytes, dt)
    out["net_tx_Bps"] = _rate(prev.net_tx_bytes, cur.net_tx_bytes, dt)
    return out


@dataclass
class HostSeries:
    """One host's figures during a run: (control-clock time at the end of the second, figures)."""

    host: str
    source: str  # proc | cgroup:<path>
    samples: list[tuple[float, dict[str, float | None]]] = field(default_factory=list)
    error: str | None = None  # why it has no (or stopped having) samples

    def add(self, prev: Counters | None, cur: Counters) -> None:
        if prev is not None:
            self.samples.append((cur.t, figures(prev, cur)))

    def null_figures(self) -> dict[str, str]:
        """Each figure that is null throughout, with why."""
        why: dict[str, str] = {}
        for name in FIGURE_NAMES:
            if any(v.get(name) is not None for _, v in self.samples):
                continue
            if self.source.startswith("cgroup") and name in SHARED_KERNEL:
                why[name] = SHARED_KERNEL_WHY
            elif not self.samples:
                why[name] = self.error or "no samples"
            else:
                why[name] = "the host does not count it (no such file or device)"
        return why

    def summary(self) -> dict[str, Any]:
        """For run.json: the source, samples, and per figure its mean and max over the run."""
        stats: dict[str, Any] = {}
        for name in FIGURE_NAMES:
            vals = [x for _, v in self.samples if (x := v.get(name)) is not None]
            if vals:
                stats[name] = {"mean": round(sum(vals) / len(vals), 3), "max": round(max(vals), 3)}
        return {"source": self.source, "samples": len(self.samples), "error": self.error, "figures": stats,
                "null": self.null_figures()}


# a line source: given `stop`, yields (control time, host time, text) until stopped
LineSource = Callable[[Callable[[], bool]], Iterator[tuple[float, float, str]]]


def script_command(source: str, cgroup: str | None) -> str:
    """The reading loop as one shell command: the script and its two words, each quoted."""
    return "exec sh -c " + shlex.join([SCRIPT, "chaoskit-metrics", source, cgroup or ""])


def remote_lines(remote: Any, source: str, cgroup: str | None) -> LineSource:
    from chaoskit.ha.hoststream import stamped

    def lines(stop: Callable[[], bool]) -> Iterator[tuple[float, float, str]]:
        for line in stamped(remote, script_command(source, cgroup), stop):
            yield line.t, line.t_host, line.text
    return lines


_WHOLE_DISK = re.compile(r"^(sd[a-z]+|vd[a-z]+|xvd[a-z]+|hd[a-z]+|nvme[0-9]+n[0-9]+|mmcblk[0-9]+)$")


def proc_line(root: Path = Path("/proc")) -> str:
    """This machine's counters as one reading-loop line of the `proc` source, read in-process (the
    same fields as `SCRIPT` prints): the control node's sampler starts no process of its own, so
    nothing of it can outlive a controller that is killed."""
    cpu = (root / "stat").read_text().splitlines()[0].split()
    ticks = [*cpu[1:9], *["0"] * max(0, 9 - len(cpu))][:8]
    load1 = (root / "loadavg").read_text().split()[0]
    mem = {k: v.split()[0] for k, _, v in (ln.partition(":") for ln in (root / "meminfo").read_text().splitlines())}
    rs = ws = 0
    for line in (root / "diskstats").read_text().splitlines():
        f = line.split()
        if len(f) > 9 and _WHOLE_DISK.match(f[2]):
            rs, ws = rs + int(f[5]), ws + int(f[9])
    rx = tx = 0
    for line in (root / "net" / "dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        f = rest.split()
        if name.strip() != "lo" and len(f) > 8:
            rx, tx = rx + int(f[0]), tx + int(f[8])
    cores = os.cpu_count() or 1
    return (f"proc {cores} {' '.join(ticks)} {load1} {mem.get('MemTotal', 0)} {mem.get('MemAvailable', 0)} "
            f"{rs} {ws} {rx} {tx}")


def local_lines(stop: Callable[[], bool]) -> Iterator[tuple[float, float, str]]:
    """The control node's own /proc once a second, in this process (its clock is the control clock)."""
    while not stop():
        t = time.time()
        yield t, t, proc_line()
        time.sleep(max(0.0, 1.0 - (time.time() - t)))


class HostSampler:
    """One reading thread per host from `start` to `stop`; a host that cannot be read is said in its
    series (`error`), never fails the run."""

    def __init__(self, sources: dict[str, tuple[str, LineSource]]) -> None:
        self.series = {h: HostSeries(h, src) for h, (src, _) in sources.items()}
        self._lines = {h: lines for h, (_, lines) in sources.items()}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for host, lines in self._lines.items():
            t = threading.Thread(target=self._read, args=(self.series[host], lines), daemon=True,
                                 name=f"metrics-{host}")
            t.start()
            self._threads.append(t)

    def _read(self, series: HostSeries, lines: LineSource) -> None:
        prev: Counters | None = None
        try:
            for t, t_host, text in lines(self._stop.is_set):
                cur = parse_line(t, t_host, text)
                if cur is not None:
                    series.add(prev, cur)
                    prev = cur
        except Exception as exc:  # a host that cannot be read is a note, not a failure
            series.error = f"{type(exc).__name__}: {exc}"[:300]
        else:
            if not self._stop.is_set():
                series.error = "the reading loop ended before the run did"

    def stop(self) -> dict[str, HostSeries]:
        """The series, each read by its host's thread alone until here. A thread still reading 10 s
        after the stop (a host that does not answer) keeps its own series: the run gets a copy of
        what it had, said in `error`, and nothing it adds later."""
        self._stop.set()
        out: dict[str, HostSeries] = {}
        for t in self._threads:
            t.join(timeout=10)
        for host, series in self.series.items():
            thread = next((t for t in self._threads if t.name == f"metrics-{host}"), None)
            if thread is not None and thread.is_alive():
                series = HostSeries(host, series.source, list(series.samples),
                                    "still reading 10 s after the run stopped: later samples left out")
            out[host] = series
        return out


def control_name(inventory: Inventory) -> str:
    return CONTROL if CONTROL not in inventory.hosts else "control_node"


def source_of(host: Host) -> str:
    m = host.metrics
    return f"cgroup:{m.cgroup}" if m.source == "cgroup" else m.source


def sampler_for(inventory: Inventory, pool: Any, hosts: list[str]) -> HostSampler:
    """A sampler over these inventory hosts (those whose `metrics.source` is not `none`) and the
    control node."""
    sources: dict[str, tuple[str, LineSource]] = {}
    for name in hosts:
        host = inventory.hosts[name]
        if host.metrics.source == "none":
            continue
        sources[name] = (source_of(host), remote_lines(pool.get(name), host.metrics.source, host.metrics.cgroup))
    sources[control_name(inventory)] = ("proc", local_lines)
    return HostSampler(sources)


def columns(series: dict[str, HostSeries], ends: list[float]) -> dict[str, list[Any]]:
    """timeline.csv's columns: `<figure>_<host>` at each interval's end, the last second's figure
    (None before the first); a figure null throughout (not counted on that host) has no column."""
    cols: dict[str, list[Any]] = {}
    for host in sorted(series):
        s = series[host]
        for name in FIGURE_NAMES:
            points = [(t, v.get(name)) for t, v in s.samples]
            if not any(v is not None for _, v in points):
                continue
            cols[f"{name}_{host}"] = [None if v is None else round(v, 3) for v in step_values(points, ends)]
    return cols


def window_means(series: dict[str, HostSeries], start: float, end: float,
                 figure: str = "cpu_busy_pct") -> dict[str, float | None]:
    """Per host, the mean of one figure over the seconds that ended inside [start, end] (an
    experiment cell's measured window)."""
    out: dict[str, float | None] = {}
    for host, s in series.items():
        vals = [x for t, v in s.samples if start < t <= end and (x := v.get(figure)) is not None]
        out[host] = round(sum(vals) / len(vals), 2) if vals else None
    return out
