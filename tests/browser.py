"""Headless Chromium for tests that must see a report as a reader's browser lays it out.

Driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands in on fd 3,
answers out on fd 4, each a JSON text ended by NUL), so no port is opened and no client library
is needed. Used to check that the headline is on the first screen at 1366 x 768 and to take the
screenshots a closing note shows."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """One headless browser with one page, sized like a laptop screen by default."""

    def __init__(self, width: int = 1366, height: int = 768, timeout: float = 60.0) -> None:
        if CHROMIUM is None:
            raise RuntimeError("chromium is not installed (Debian package `chromium`; .ci/install installs it)")
        self.width, self.height, self.timeout = width, height, timeout
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        self._profile = tempfile.TemporaryDirectory(prefix="chaoskit-chromium-")
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()
        # fd 3 and 4 in the child must be exactly these pipe ends: copies above any fd they could
        # collide with (close-on-exec), then dup2'd into place in the child (dup2 keeps them open
        # across exec; close_fds would close them after this hook, so it is off)
        high_in = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD_CLOEXEC, 100)
        high_out = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD_CLOEXEC, 100)

        def wire() -> None:
            os.dup2(high_in, 3)
            os.dup2(high_out, 4)

        self._proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--hide-scrollbars", "--force-device-scale-factor=1",
             "--remote-debugging-pipe", f"--user-data-dir={self._profile.name}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=wire, close_fds=False)
        for fd in (to_browser_r, from_browser_w, high_in, high_out):
            os.close(fd)
        target = self._call("Target.createTarget", url="about:blank")["targetId"]
        self._session = self._call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self._call("Page.enable", session=True)
        self._call("Emulation.setDeviceMetricsOverride", session=True, width=self.width, height=self.height,
                   deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self._send("Browser.close")
            self._proc.wait(timeout=10)
        except Exception:  # a browser that will not close is ended by its pid
            self._proc.kill()
            self._proc.wait()
        finally:
            os.close(self._to_browser)
            os.close(self._from_browser)
            self._profile.cleanup()

    def open(self, path: Path) -> None:
        """Load a local file and wait for its load event."""
        self._events.clear()
        self._call("Page.navigate", session=True, url=path.resolve().as_uri())
        self._wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (returned by value)."""
        result = self._call("Runtime.evaluate", session=True, expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, out: Path) -> Path:
        """The first screen (the viewport at scroll 0) as PNG."""
        data = self._call("Page.captureScreenshot", session=True, format="png")["data"]
        out.write_bytes(base64.b64decode(data))
        return out

    # the protocol
    def _send(self, method: str, session: bool = False, **params: Any) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self._session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        want = self._send(method, session, **params)
        while True:
            message = self._receive()
            if message.get("id") == want:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result") or {}
            if "method" in message:
                self._events.append(message)

    def _wait_event(self, method: str) -> dict[str, Any]:
        while True:
            for event in self._events:
                if event["method"] == method:
                    return event
            self._events.append(self._receive())

    def _receive(self) -> dict[str, Any]:
        import select

        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._from_browser], [], [], self.timeout)
            if not ready:
                raise TimeoutError(f"chromium said nothing for {self.timeout} s")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError(f"chromium closed its pipe (exit {self._proc.poll()})")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)


def pdf_pages_as_png(pdf: Path, out_dir: Path, dpi: int = 60) -> list[Path]:
    """Every page of a PDF as a PNG with poppler's pdftoppm (what a reader's viewer shows)."""
    tool = shutil.which("pdftoppm")
    if tool is None:
        raise RuntimeError("pdftoppm is not installed (Debian package `poppler-utils`; .ci/install installs it)")
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run([tool, "-r", str(dpi), "-png", "--", str(pdf), str(out_dir / "page")], check=True,
                   capture_output=True, timeout=120)
    return sorted(out_dir.glob("page-*.png"))
