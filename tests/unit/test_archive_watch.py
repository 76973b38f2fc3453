"""The archive watched through a drill: the readings (`ArchiveWatch.read`) and what the analysis
makes of them (`archive_figures`), by hand."""

from __future__ import annotations

from typing import Any

from chaoskit.analysis.restore import archive_figures
from chaoskit.backup.watch import ArchiveWatch

T0 = 1000.0


def test_the_archive_over_a_run() -> None:
    samples = [
        {"t": T0 + 1, "archive_age_s": 2.0, "failing": False, "last_archived": "A", "archive_timeout_s": 3.0},
        {"t": T0 + 2, "archive_age_s": 3.0, "failing": True, "last_archived": "A"},  # the repository cut
        {"t": T0 + 3, "archive_age_s": 4.0, "failing": True, "last_archived": "A"},
        {"t": T0 + 4, "error": "OperationalError: connection refused"},  # the primary down
        {"t": T0 + 5, "archive_age_s": 1.0, "failing": False, "last_archived": "C"},  # caught up
        {"t": T0 + 6, "archive_age_s": 9.5, "failing": True, "last_archived": "C"},  # failing to the end
    ]
    assert archive_figures(samples, T0) == {
        "readings": 6, "unread": 1, "max_age_s": 9.5, "max_age_at_s": 6.0,
        "failing": [[2.0, 5.0], [6.0, None]], "last_archived": "C",
        # older than archive_timeout (3 s) at +3 (4.0 s) and +6 (9.5 s); the unread reading is no reading
        "archive_timeout_s": 3.0, "over_archive_timeout": [[3.0, 5.0], [6.0, None]]}
    assert archive_figures([], T0) is None


class Tool:
    def __init__(self, views: list[Any]) -> None:
        self.views = views

    def archive_view(self, driver: Any, conn: Any) -> dict[str, Any]:
        view = self.views.pop(0)
        if isinstance(view, Exception):
            raise view
        return view


class Driver:
    connects = 0

    def tuned(self, **_: Any) -> Driver:
        return self

    def connect_writer(self) -> object:
        Driver.connects += 1
        return object()


def test_a_reading_that_fails_is_kept_as_such_and_the_connection_made_again() -> None:
    ok = {"last_archived": "A", "last_archived_t_host": 10.0, "last_failed_t_host": None, "archive_age_s": 1.5}
    tool = Tool([ok, RuntimeError("server closed the connection unexpectedly\nThis probably means..."),
                 {**ok, "last_failed_t_host": 12.0, "archive_age_s": 4.0}])
    watch = ArchiveWatch(tool, Driver(), lambda: 42.0)  # type: ignore[arg-type]
    first, second, third = watch.read(), watch.read(), watch.read()
    assert (first["failing"], first["archive_age_s"]) == (False, 1.5)
    assert second == {"t": 42.0, "error": "RuntimeError: server closed the connection unexpectedly"}
    assert (third["failing"], third["archive_age_s"]) == (True, 4.0)  # failed after its last success
    assert Driver.connects == 2
