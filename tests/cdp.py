"""A small Chrome DevTools Protocol client over Chromium's --remote-debugging-pipe (no port, no
WebSocket): a headless Chromium in a fresh profile, one page, commands and the events they cause.

The pipe carries NUL-terminated JSON messages: Chromium reads commands on its fd 3 and writes
replies and events on its fd 4 (https://chromedevtools.github.io/devtools-protocol/).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import tempfile
import time

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--hide-scrollbars", "--mute-audio")


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class CDPError(RuntimeError):
    pass


class Browser:
    """One headless Chromium with one page; `events` keeps every event received."""

    def __init__(self, width: int = 1400, height: int = 1000, timeout: float = 60.0):
        exe = chromium_path()
        if exe is None:
            raise CDPError("chromium is not installed (`make install` installs it)")
        self.profile = tempfile.mkdtemp(prefix="stallscope-chromium-")
        self.timeout = timeout
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # above 9 and apart from 3 and 4, where they go in the child
        to_chrome_r, from_chrome_w = (self._high(fd) for fd in (to_chrome_r, from_chrome_w))
        args = [exe, *FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
                f"--window-size={width},{height}", "about:blank"]
        # the shell puts the pipe ends where Chromium expects them, fds 3 and 4
        script = f'exec 3<&{to_chrome_r} 4>&{from_chrome_w} {to_chrome_r}<&- {from_chrome_w}>&-; exec "$@"'
        self.proc = subprocess.Popen(["bash", "-c", script, "bash", *args], pass_fds=(to_chrome_r, from_chrome_w),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=open(os.environ.get("CDP_LOG", os.devnull), "w"))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict] = []
        self.session = None
        try:
            targets = self.call("Target.getTargets", session=False)["targetInfos"]
            page = next(t for t in targets if t["type"] == "page")
            self.session = self.call("Target.attachToTarget", {"targetId": page["targetId"], "flatten": True},
                                     session=False)["sessionId"]
            for domain in ("Runtime", "Log", "Network", "Page"):
                self.call(f"{domain}.enable")
            self.call("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _high(fd: int) -> int:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(fd)
        return high

    # ---- the pipe ------------------------------------------------------------------------------
    def _send(self, msg: dict) -> None:
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self._to_chrome, data)
            data = data[n:]

    def _receive(self, deadline: float) -> dict:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise CDPError("no answer from chromium in time")
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if ready:
                chunk = os.read(self._from_chrome, 1 << 20)
                if not chunk:
                    raise CDPError("chromium closed the DevTools pipe")
                self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, params: dict | None = None, session: bool = True, timeout: float | None = None) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        self._send(msg)
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise CDPError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method: str, timeout: float | None = None) -> dict:
        """The first event `method` not yet consumed (events are kept in self.events too)."""
        deadline = time.monotonic() + (timeout or self.timeout)
        seen = getattr(self, "_consumed", set())
        self._consumed = seen
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == method and i not in seen:
                    seen.add(i)
                    return e
            self.events.append(self._receive(deadline))

    # ---- what tests use ------------------------------------------------------------------------
    def open(self, url: str) -> None:
        self.call("Page.navigate", {"url": url})
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str, timeout: float | None = None):
        r = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True},
                      timeout=timeout)
        if "exceptionDetails" in r:
            raise CDPError(f"{expression[:80]}: {r['exceptionDetails'].get('exception', {}).get('description') or r['exceptionDetails']}")
        return r["result"].get("value")

    def screenshot(self, path: str, full_page: bool = False) -> None:
        params = {"format": "png"}
        if full_page:
            metrics = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": metrics["width"], "height": metrics["height"], "scale": 1})
        data = self.call("Page.captureScreenshot", params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def console_errors(self) -> list[str]:
        """Console errors, uncaught exceptions and browser log errors (a CSP violation is one)."""
        out = []
        for e in self.events:
            p = e.get("params", {})
            if e["method"] == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
            elif e["method"] == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif e["method"] == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
                out.append(p["entry"].get("text", ""))
        return out

    def requests(self) -> list[str]:
        return [e["params"]["request"]["url"] for e in self.events if e["method"] == "Network.requestWillBeSent"]

    def dialogs(self) -> list[str]:
        return [e["params"].get("message", "") for e in self.events if e["method"] == "Page.javascriptDialogOpening"]

    def close(self) -> None:
        try:
            self._send({"id": 0, "method": "Browser.close"})
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def main(argv: list[str]) -> int:
    """`python tests/cdp.py PAGE.html OUT.png [WIDTH HEIGHT]`: a screenshot of a page's first screen, once its
    scripts have run (how docs/report.png and docs/diff.png were made)."""
    page, out = os.path.abspath(argv[0]), argv[1]
    width, height = (int(argv[2]), int(argv[3])) if len(argv) > 3 else (1400, 1000)
    with Browser(width, height) as b:
        b.open(f"file://{page}")
        deadline = time.monotonic() + 30
        while not b.evaluate("!!(window.__stallscope && window.__stallscope.ready)") and time.monotonic() < deadline:
            time.sleep(0.1)
        b.screenshot(out)
        errors = b.console_errors()
    for e in errors:
        print(f"console error: {e}")
    return 1 if errors else 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
