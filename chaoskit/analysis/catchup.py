"""A standby's return after a fault on it, as its primary saw it (pg_stat_replication sampled by
the role probe every interval):

- t_back: the fault's end (the kill's revert restarted it, the partition healed, the pause ended);
- streaming_s: from t_back to the first sample where the primary lists it as `streaming`;
- caught_up_s: from t_back to the first sample, once streaming, whose replay lag is back at the
  standby's own level before the fault (the largest replay lag in bytes sampled during the
  baseline: under steady writes a healthy standby is never at exactly zero bytes);
- peak_lag_bytes / peak_replay_delay_s: the largest lag sampled between t_back and caught up (a
  standby that fetches a few MB of WAL catches up well inside one probe interval, so this is often
  small: it is what was seen, not how far behind it came back);
- missed_bytes: how far behind it came back, the WAL written while it was away: the primary's WAL
  position in the first sample, from t_back on, that lists the standby again, minus the standby's
  own replay position last sampled before the fault (PostgreSQL LSNs; exact to within one probe
  interval's WAL at either end). Null where positions are not byte offsets (MySQL GTID sets);
- rewound / rebuilt: from a rejoin action on that member when the drill had one, else from the
  manager's own states where it names a rebuild (Patroni: `creating replica`); null otherwise.
MySQL/MariaDB replicas report their own state (SHOW SLAVE STATUS: both threads running is
`streaming`, the lag is the binlog bytes received but not applied). Null with a note where the
engine reports no replication."""

from __future__ import annotations

import re
from typing import Any

from chaoskit.topology.probe import ProbeLog

REBUILD_STATES = ("creating replica",)
LSN = re.compile(r"([0-9A-Fa-f]{1,8})/([0-9A-Fa-f]{1,8})")


def lsn_bytes(position: str) -> int | None:
    """A PostgreSQL LSN (`16/B374D848`) as a byte offset into the WAL; None for anything else."""
    m = LSN.fullmatch(position)
    return None if m is None else (int(m[1], 16) << 32) + int(m[2], 16)


def missed_wal_bytes(probe: ProbeLog, member: str, t_fault: float, t_listed: float | None,
                     notes: list[str]) -> int | None:
    """WAL written while the member was away (see the module's docstring)."""
    if t_listed is None or not probe.positions:
        return None
    before = [p for t, m, p in probe.positions if m == member and t < t_fault]
    if before and lsn_bytes(before[-1]) is None:
        notes.append("positions are not byte offsets (GTID sets): no missed_bytes")
        return None
    # the primary's loop records its standbys and its own position with one timestamp
    primary = next((p for t, m, p in probe.positions if t == t_listed and m != member), None)
    start, end = (lsn_bytes(before[-1]) if before else None), (lsn_bytes(primary) if primary else None)
    if start is None or end is None:
        notes.append(f"no WAL position of {member} before the fault or of its primary when it was back: "
                     "missed_bytes unknown")
        return None
    return end - start


def standby_catchup(probe: ProbeLog, member: str, t_fault: float, t_back: float | None, window_end: float, *,
                    baseline: tuple[float, float], actions: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"member": member, "t_back": t_back, "streaming_s": None, "caught_up_s": None,
                           "peak_lag_bytes": None, "peak_replay_delay_s": None, "rewound": None, "rebuilt": None,
                           "baseline_lag_bytes": None, "missed_bytes": None, "notes": []}
    if not probe.replication:
        out["notes"].append("the engine reports no replication status: no catch-up figures")
        return out
    before = [lag for t, s in probe.replication
              if baseline[0] <= t <= baseline[1] and member in s and (lag := s[member][1]) is not None]
    level = max(before) if before else 0
    out["baseline_lag_bytes"] = level
    if t_back is None:
        out["notes"].append("the fault has no end within the drill: no catch-up")
        return out
    after = [(t, s[member]) for t, s in probe.replication if t_back <= t < window_end and member in s]
    t_listed = after[0][0] if after else None
    t_streaming = next((t for t, (state, _, _) in after if state == "streaming"), None)
    t_caught = next((t for t, (state, lag, _) in after if t_streaming is not None and t >= t_streaming
                     and state == "streaming" and lag is not None and lag <= level), None)
    seen = [(lag, delay) for t, (_, lag, delay) in after if t_caught is None or t <= t_caught]
    lags = [lag for lag, _ in seen if lag is not None]
    delays = [d for _, d in seen if d is not None]
    out.update({
        "streaming_s": None if t_streaming is None else round(t_streaming - t_back, 6),
        "caught_up_s": None if t_caught is None else round(t_caught - t_back, 6),
        "t_streaming": t_streaming, "t_caught_up": t_caught,
        "peak_lag_bytes": max(lags) if lags else None, "peak_replay_delay_s": max(delays) if delays else None,
        "missed_bytes": missed_wal_bytes(probe, member, t_fault, t_listed, out["notes"]),
    })
    if t_streaming is None:
        out["notes"].append(f"{member} was not streaming again before the window ended")
    elif t_caught is None:
        out["notes"].append(f"{member} streamed again but its lag never came back to {level} bytes in the window")
    rejoin = next((a for a in actions if a.get("kind") == "rejoin" and a.get("member") == member), None)
    if rejoin is not None:
        out["rewound"], out["rebuilt"] = rejoin.get("rewound"), rejoin.get("rebuilt")
    else:
        states = {st.split("/")[1] for t, _, states in probe.manager if t_fault <= t < window_end
                  for m, st in states.items() if m == member and "/" in st}
        if states:
            out["rebuilt"] = any(s in REBUILD_STATES for s in states)
            out["manager_states"] = sorted(states)
        else:
            out["notes"].append("rewind/rebuild not observable: no rejoin action and no manager states")
    return out
