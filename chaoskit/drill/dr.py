"""A drill's disaster-recovery actions (`backup`, `drop_table`, `restore`), run by the schedule
like any action and recorded in `record.actions`, with the cluster's backup tool
(`chaoskit.backup`, the inventory's `backup:`).

- backup: the tool takes one now; its label, type, marks and what it said are recorded;
- drop_table: the load's own ledger table dropped on the primary (the disaster); the archive's
  view at that instant (last archived segment and its age, as the primary says) is recorded first;
- restore: the target instant resolved (`to`: before a step of this drill, an instant, or the
  latest), the archive made to hold everything written so far while the primary answers
  (`flush_archive`; a failure is said, not fatal: a lost primary cannot), then the restore
  (`chaoskit.backup.base.restore`). The restored server is what the drill's data checks read
  after the run (`restored`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaoskit.backup.base import BackupTool, restore, restored_cluster, utc_text
from chaoskit.backup.registry import tool_for
from chaoskit.db.base import Driver
from chaoskit.db.registry import driver_for
from chaoskit.faults.manager import FaultManager
from chaoskit.inventory.models import Cluster, Inventory
from chaoskit.playbook.models import DR_ACTIONS, Action, Playbook
from chaoskit.playbook.record import DrillInputs
from chaoskit.timesource import Clock

ANSWER_TIMEOUT_S = 2.0  # one try to connect to the restored server as a writer


def restored_target(inputs: DrillInputs) -> Cluster | None:
    """The restored server as a cluster of one, where the playbook restores (else None)."""
    declared = inputs.inventory.clusters[inputs.playbook.cluster]
    if not inputs.playbook.actions("restore") or declared.backup is None or declared.backup.restore_to is None:
        return None
    return restored_cluster(declared, declared.backup.restore_to)


def writer_refusal(driver: Driver) -> str | None:
    """Why one try to connect to the writer failed, in the driver's words (None: it connected)."""
    conn = None
    try:
        conn = driver.connect_writer()
        return None
    except Exception as exc:
        return driver.failure(exc)
    finally:
        Driver.close_quietly(conn)


def backup_refusal(pb: Playbook, inventory: Inventory, remote: Callable[[str], Any],
                   offset: Callable[[str], Any], now: Callable[[], float]) -> str | None:
    """Why a drill with backup, disaster or restore steps cannot run (read-only, before anything
    is touched): the backup tool missing or its configuration unreadable on the repository host
    (and the restore target where the drill restores); a restore with no backup to start from (the
    repository holds none and no backup step comes before it); a restore to a named instant
    before the oldest backup the repository holds, or after now (it may be after the disaster)."""
    declared = inventory.clusters[pb.cluster]
    if declared.backup is None or not pb.actions(*DR_ACTIONS):
        return None
    tool = tool_for(declared, inventory, remote, offset)
    repo, target = declared.backup.repository, declared.backup.restore_to
    where = [(repo.host, repo.config, repo.os_user)]
    if pb.actions("restore") and target is not None:
        where.append((target.host, target.config, target.os_user))
    for host, config, user in where:
        why = tool.missing(host, config, user)
        if why is not None:
            return f"backup tool {tool.NAME}: {why}"
    for i, step in enumerate(pb.steps):
        action = step.action
        if action is None or action.kind != "restore":
            continue
        taken_before = any(s.action is not None and s.action.kind == "backup" for s in pb.steps[:i])
        named = None if isinstance(action.to, str) else action.to.time
        if named is not None and named.timestamp() > now():
            return (f"steps[{i}].action.to.time: {named.isoformat()} is after the drill starts ({utc_text(now())}): "
                    "it may come after the disaster, whose changes the restore would bring back; a named instant "
                    "must have passed (to restore to an instant of this drill, name its step: {step: N, before: 2s})")
        if taken_before and named is None:
            continue
        ended = [b["stop"] for b in tool.backups() if b.get("stop") and not b.get("error")]
        if not ended and not taken_before:
            return (f"steps[{i}] (restore): the repository holds no backup of {declared.name} and no backup step "
                    "comes before it: nothing to restore from")
        # a named instant: a backup must end before it (one the drill takes ends after now)
        if named is not None and (named.timestamp() < min(ended) if ended else named.timestamp() < now()):
            oldest = f"the oldest ended {utc_text(min(ended))}" if ended else "it holds none yet"
            return (f"steps[{i}].action.to.time: {named.isoformat()} is before the oldest backup in the repository "
                    f"({oldest}): nothing can be restored to it")
    return None


class DrActions:
    def __init__(self, inputs: DrillInputs, fm: FaultManager, driver: Driver, clock: Clock,
                 step_started: Callable[[int], float | None]) -> None:
        self.inputs, self.fm, self.driver, self.clock = inputs, fm, driver, clock
        self.step_started = step_started
        self.declared = inputs.inventory.clusters[inputs.playbook.cluster]
        self._tool: BackupTool | None = None

    @property
    def tool(self) -> BackupTool:
        if self._tool is None:
            self._tool = tool_for(self.declared, self.inputs.inventory, self.fm.pool.get, self.fm.offset)
        return self._tool

    def act(self, action: Action) -> dict[str, Any]:
        if action.kind == "backup":
            return self.backup(action)
        if action.kind == "drop_table":
            return self.drop_table()
        return self.restore(action)

    def backup(self, action: Action) -> dict[str, Any]:
        t_sent = self.clock.now()
        try:
            said = self.tool.take(action.type)
        except Exception as exc:
            return {"kind": "backup", "type": action.type, "ok": False, "t_sent": t_sent,
                    "t_answered": self.clock.now(), "answer": f"{type(exc).__name__}: {exc}"}
        return {"kind": "backup", "type": action.type, "ok": said.ok, "t_sent": t_sent, "t_answered": self.clock.now(),
                "member": self.tool.config.repository.host, "answer": said.answer[-600:], **said.facts,
                "marks": [m.to_dict() for m in said.marks]}

    def drop_table(self) -> dict[str, Any]:
        from chaoskit.workload.workloads import WORKLOADS

        table = WORKLOADS[self.inputs.playbook.load.workload_name].TABLE  # type: ignore[attr-defined]
        t_sent = self.clock.now()
        record: dict[str, Any] = {"kind": "drop_table", "table": table, "t_sent": t_sent}
        conn = None
        try:
            conn = self.driver.tuned(connect_timeout=5.0, op_timeout=30.0).connect_writer()
            try:
                record["archive"] = self.archive_view(conn)
            except Exception as exc:  # the view is evidence, the drop is the step
                record["archive"] = {"error": f"{type(exc).__name__}: {exc}"}
            record["t_sent"] = self.clock.now()
            self.driver.execute(conn, f"DROP TABLE {table}")
            return {**record, "ok": True, "t_answered": self.clock.now(), "answer": f"DROP TABLE {table}"}
        except Exception as exc:
            return {**record, "ok": False, "t_answered": self.clock.now(), "answer": f"{type(exc).__name__}: {exc}"}
        finally:
            Driver.close_quietly(conn)

    def flush_archive(self) -> dict[str, Any]:
        """The archive made to hold everything written so far, where the primary answers (one try
        to connect, `ANSWER_TIMEOUT_S`): a primary that is gone has nothing more to give, and the
        tool would wait its own timeout for it (pgBackRest: 60 s) before saying so."""
        why = writer_refusal(self.driver.tuned(connect_timeout=ANSWER_TIMEOUT_S, op_timeout=ANSWER_TIMEOUT_S))
        if why is not None:
            return {"ok": False, "skipped": True, "t": self.clock.now(),
                    "answer": f"not flushed: the primary did not answer ({why}); the restore reads the archive "
                              "as it is"}
        said = self.tool.flush_archive()
        return {"ok": said.ok, "answer": said.answer[-400:], "t": self.clock.now()}

    def archive_view(self, conn: Any) -> dict[str, Any]:
        """The tool's archive view, its host-clock instants also on the control clock (the
        primary's host offset, as the drill measured it)."""
        view = self.tool.archive_view(self.driver, conn)
        primary = self._primary_host()
        if primary is not None:
            off = self.fm.offset(primary)
            for key in ("last_archived_t_host", "last_failed_t_host"):
                if view.get(key) is not None:
                    view[key.replace("_host", "")] = off.to_control(view[key])
        return view

    def _primary_host(self) -> str | None:
        try:
            view, _ = self.fm.roles(self.declared)
        except Exception:
            return None
        return next((h for h, r in view.items() if r == "primary"), None)

    def target_instant(self, action: Action) -> float | None:
        to = action.to
        if isinstance(to, str):  # latest
            return None
        if to.time is not None:
            return to.time.timestamp()
        assert to.step is not None
        started = self.step_started(to.step)
        if started is None:
            raise RuntimeError(f"steps[{to.step}] has not run: no instant to restore before")
        return started - to.before

    def restore(self, action: Action) -> dict[str, Any]:
        t_sent = self.clock.now()
        try:
            target_t = self.target_instant(action)
        except RuntimeError as exc:
            return {"kind": "restore", "ok": False, "t_sent": t_sent, "t_answered": self.clock.now(),
                    "answer": str(exc)}
        flushed = self.flush_archive() if action.flush_archive else None
        target = restored_target(self.inputs)
        assert target is not None  # validated: a restore needs backup.restore_to
        probe = driver_for(target, self.inputs.inventory).tuned(connect_timeout=ANSWER_TIMEOUT_S,
                                                                op_timeout=ANSWER_TIMEOUT_S)

        def answers() -> bool:
            return writer_refusal(probe) is None

        # the target goes to the server on the primary's clock (commit stamps are the primary's);
        # a write is placed against it within that clock's uncertainty
        primary = self._primary_host() if target_t is not None else None
        offset = self.fm.offset(primary) if primary is not None else None
        shift = offset.offset_s if offset is not None else 0.0  # control clock -> the primary's
        sent_t = None if target_t is None else target_t + shift
        try:
            record = restore(self.tool, sent_t, answers=answers, now=self.clock.now, sleep=self.clock.sleep,
                             journal_root=self.fm.journal_root)
        except Exception as exc:
            record = {"kind": "restore", "ok": False, "t_answered": self.clock.now(),
                      "answer": f"{type(exc).__name__}: {exc}"}
        record["t_sent"] = t_sent
        record["flush_archive"] = flushed
        if record.get("last_commit_host_t") is not None:  # a stamp of the primary's clock
            record["last_commit_t"] = record["last_commit_host_t"] - shift
        if target_t is not None and sent_t is not None:
            record["target"] = {"t": target_t, "utc": utc_text(target_t), "sent_utc": utc_text(sent_t),
                                "primary": primary, "primary_offset_s": offset.offset_s if offset else None,
                                "margin_s": offset.uncertainty_s if offset else 0.0,
                                "said": action.to if isinstance(action.to, str) else action.to.model_dump(mode="json")}
        return record
