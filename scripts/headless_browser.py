"""A real headless Chromium, driven over the DevTools protocol: open a page, wait for it, read its
DOM, take a screenshot. Enough for ``prefect_ui_check.py`` without a browser-driver package: the
protocol is a websocket (``websockets`` comes with Prefect) and Debian's ``chromium`` is the browser.

The flags are the ones this machine's Chromium needs headless as root, with a closed network: no
sandbox, no GPU, no background networking (it would try Google's hosts at every start).
"""

from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--remote-debugging-port=0")


class Browser:
    """One headless Chromium with one page, ``width`` x ``height`` CSS pixels."""

    def __init__(self, *, width: int = 1440, height: int = 1000, binary: str | None = None) -> None:
        chromium = binary or shutil.which("chromium") or shutil.which("chromium-browser")
        if chromium is None:
            raise SystemExit("needs Chromium: apt-get install -y chromium")
        self.profile = Path(tempfile.mkdtemp(prefix="ui-check-chromium-"))
        self.proc = subprocess.Popen([chromium, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}",
                                      f"--window-size={width},{height}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.ids = itertools.count(1)
        self.ws = self._connect()
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": False})

    def _connect(self) -> ClientConnection:
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not active.exists() or not active.read_text().strip():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("Chromium did not start")
            time.sleep(0.1)
        port = active.read_text().split()[0]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json") as answer:  # noqa: S310 - localhost
            pages = [t for t in json.load(answer) if t.get("type") == "page"]
        return connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=30)

    def send(self, method: str, params: dict[str, Any] | None = None, *, timeout: float = 60) -> dict[str, Any]:
        call = next(self.ids)
        self.ws.send(json.dumps({"id": call, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            message = json.loads(self.ws.recv(timeout=max(0.1, deadline - time.monotonic())))
            if message.get("id") == call:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result

    def goto(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})

    def js(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, *, timeout: float = 60, what: str = "") -> Any:
        """Until ``expression`` (JavaScript) is truthy; its value."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = self.js(expression)
            if value:
                return value
            time.sleep(0.3)
        raise TimeoutError(f"the page never showed {what or expression}")

    def screenshot(self, path: Path, *, full_page: bool = False) -> Path:
        params: dict[str, Any] = {"format": "png"}
        if full_page:
            size = self.js("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
            params["clip"] = {"x": 0, "y": 0, "width": size[0], "height": min(size[1], 4000), "scale": 1}
            params["captureBeyondViewport"] = True
        data = self.send("Page.captureScreenshot", params)["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
