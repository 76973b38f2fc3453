"""HA-manager settings a drill or experiment changes are journaled like faults and always restored.

Before a change is applied, a journal entry is written on the control node (the previous values,
the inventory and cluster to restore them through, the controller's identity, a deadline) and a
detached dead-man is started (`python -m chaoskit.ha.settings ENTRY`). The controller restores
the previous values on normal end, error, Ctrl-C and SIGTERM and removes the entry; if the
controller dies (SIGKILL included), the dead-man sees it within a fraction of a second, restores
the values itself (retrying) and removes the entry; `chaoskit recover` restores whatever is left.
A 401, a TLS error or a refusal from the manager is an error here, never a silent no-op.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from chaoskit.lifeline import controller_alive, controller_identity, process_start_time

POLL_S = 0.2


def journal_dir() -> Path:
    base = Path("/var/lib/chaoskit/controller") if os.geteuid() == 0 else \
        Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "chaoskit"
    d = base / "settings"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    d.chmod(0o700)
    return d


class SettingsChange:
    """One journaled change of one cluster's manager settings."""

    def __init__(self, path: Path, entry: dict[str, Any], deadman: subprocess.Popen | None) -> None:
        self.path = path
        self.entry = entry
        self.deadman = deadman
        self.restored = False

    @property
    def previous(self) -> dict[str, Any]:
        return self.entry["previous"]

    def restore(self, manager: Any) -> dict[str, Any]:
        """Put the previous values back (raises on failure, keeping the entry for the dead-man)."""
        if self.restored:
            return {}
        manager.apply_settings(self.previous)
        self.restored = True
        self.path.unlink(missing_ok=True)
        if self.deadman is not None and self.deadman.poll() is None:
            self.deadman.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.deadman.wait(5)
        return self.previous


def change_settings(manager: Any, inventory_path: str, values: dict[str, Any], ttl_s: float) -> SettingsChange:
    """Journal, arm the dead-man, then apply. The previous values are read first."""
    current = manager.read_settings()
    previous = {k: current.get(k) for k in values}
    entry = {"id": uuid.uuid4().hex[:12], "inventory": str(Path(inventory_path).resolve()),
             "cluster": manager.cluster.name, "manager": manager.kind, "applied": values, "previous": previous,
             "controller": controller_identity(), "created": time.time(), "deadline": time.time() + ttl_s}
    path = journal_dir() / f"{entry['id']}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(entry, fh)
    env = {k: v for k, v in os.environ.items() if k != "CHAOSKIT_CONTROLLER_PID"}
    deadman = subprocess.Popen([sys.executable, "-m", "chaoskit.ha.settings", str(path)], start_new_session=True,
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=env, close_fds=True)
    change = SettingsChange(path, entry, deadman)
    try:
        reported = manager.apply_settings(values)
    except BaseException:
        with contextlib.suppress(Exception):
            change.restore(manager)
        raise
    # what the manager itself reports as previous wins (it read them in the same request)
    entry["previous"] = {k: reported.get(k, previous.get(k)) for k in values}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(entry))
    tmp.chmod(0o600)
    os.replace(tmp, path)
    return change


def pending() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for p in sorted(journal_dir().glob("*.json")):
        try:
            out.append((p, json.loads(p.read_text())))
        except (OSError, ValueError):
            continue
    return out


def restore_entry(entry: dict[str, Any]) -> None:
    from chaoskit.ha.registry import manager_for
    from chaoskit.inventory.loader import load_inventory

    inv = load_inventory(entry["inventory"])
    manager_for(inv.clusters[entry["cluster"]], inv).apply_settings(entry["previous"])


def recover(force: bool = False) -> dict[str, str]:
    """Restore every journaled change whose controller is gone (or every one, with `force`)."""
    out = {}
    for path, entry in pending():
        if not force and controller_alive(entry):
            out[entry["id"]] = f"skipped: its controller (pid {entry['controller']['pid']}) is still running"
            continue
        try:
            restore_entry(entry)
            path.unlink(missing_ok=True)
            out[entry["id"]] = f"restored {entry['cluster']} {entry['previous']}"
        except Exception as exc:
            out[entry["id"]] = f"failed: {exc}"
    return out


def _deadman(path: Path) -> None:
    """Wait while the controller lives and the entry exists; then restore, retrying."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        entry = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    ctl = entry["controller"]
    while path.exists():
        alive = process_start_time(ctl["pid"]) == ctl["start"]
        if not alive or time.time() >= entry["deadline"]:
            break
        time.sleep(POLL_S)
    for _ in range(20):
        if not path.exists():
            return
        try:
            entry = json.loads(path.read_text())  # the controller may have recorded the manager's own view
            restore_entry(entry)
            path.unlink(missing_ok=True)
            return
        except Exception as exc:
            entry.setdefault("restore_errors", []).append(f"{time.time():.3f} {exc}")
            with contextlib.suppress(OSError):
                path.write_text(json.dumps(entry))
            time.sleep(3)


if __name__ == "__main__":
    _deadman(Path(sys.argv[1]))
