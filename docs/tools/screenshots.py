"""Screenshot each dashboard view: serve ``app.py`` on loopback, shoot with headless Chromium, stop.

Usage: ``python docs/tools/screenshots.py [--out docs/screenshots] [--views Timeline Sweeps ...]
[--query "device=NVIDIA+H200+141+GB"]``. Needs Debian's ``chromium`` on PATH.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[2]
VIEWS = ("Will it fit?", "Timeline", "Sweeps", "Layers", "Calibration", "Recommend")  # kvsim.dashboard.pages.VIEWS
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def slug(view: str) -> str:
    """A view's file name stem: ``Will it fit?`` is ``will-it-fit``."""
    return re.sub(r"[^a-z0-9]+", "-", view.lower()).strip("-")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(port: int, timeout_s: float = 60.0) -> None:
    """Poll Streamlit's health endpoint until it answers ``ok``.

    Raises:
        TimeoutError: if it does not within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as resp:
                if resp.read().strip() == b"ok":
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError(f"streamlit on port {port}: not healthy after {timeout_s:.0f} s")


READY_JS = """(() => {
  const main = document.querySelector('[data-testid="stMain"]');
  if (!main || document.querySelector('[data-testid="stSkeleton"]')) return false;
  const status = document.querySelector('[data-testid="stStatusWidget"]');
  if (status && status.innerText.trim()) return false;  // "Running..."
  const bars = [...document.querySelectorAll('[data-testid="stProgress"]')];
  if (bars.some(bar => !bar.innerText.includes(" cut ("))) return false;  // a bar left says what a sweep cut
  const text = main.innerText;  // pages rerun as their simulations finish
  if (text.includes("still computing") || /predicted\)?\.\.\./.test(text)) return false;
  return main.innerText.length > 40;
})()"""


class DevTools:
    """A minimal Chrome DevTools Protocol client over one page's websocket (``websockets``, a streamlit dependency)."""

    def __init__(self, ws: Any) -> None:
        self.ws, self.next_id = ws, 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            reply = json.loads(await self.ws.recv())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"devtools {method}: {reply['error']}")
                return reply.get("result", {})


def _page_ws_url(port: int, timeout_s: float = 30.0) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as resp:
                pages = [t for t in json.load(resp) if t.get("type") == "page"]
            if pages:
                return str(pages[0]["webSocketDebuggerUrl"])
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"chromium: no devtools page on port {port} after {timeout_s:.0f} s")


async def _capture(ws_url: str, url: str, settle_s: float, timeout_s: float) -> bytes:
    from websockets.asyncio.client import connect

    async with connect(ws_url, max_size=256 << 20) as ws:
        return await _render_and_shoot(DevTools(ws), url, settle_s, timeout_s)


async def _ready(tools: DevTools) -> bool:
    done = await tools.call("Runtime.evaluate", expression=READY_JS, returnByValue=True)
    return done.get("result", {}).get("value") is True


async def _render_and_shoot(tools: DevTools, url: str, settle_s: float, timeout_s: float) -> bytes:
    await tools.call("Page.enable")
    await tools.call("Page.navigate", url=url)
    deadline = time.monotonic() + timeout_s
    while True:
        if await _ready(tools):
            await asyncio.sleep(settle_s)  # charts animate in; a rerun may start meanwhile
            if await _ready(tools):
                break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{url}: the app did not finish rendering in {timeout_s:.0f} s")
        await asyncio.sleep(0.25)
    shot = await tools.call("Page.captureScreenshot", format="png")
    return base64.b64decode(shot["data"])


def shoot(url: str, out: Path, size: str, settle_s: float, timeout_s: float) -> None:
    """Headless Chromium on ``url``; once the app has rendered, a PNG written atomically to ``out``.

    Chromium's own ``--screenshot`` fires before Streamlit's websocket delivers the page
    (virtual time does not wait for websockets), so the shot is taken over DevTools.
    """
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium: not found on PATH (apt-get install -y chromium)")
    out.parent.mkdir(parents=True, exist_ok=True)
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="kvsim-chromium-", ignore_cleanup_errors=True) as profile:
        cmd = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}", f"--remote-debugging-port={port}", "about:blank"]
        browser = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            png = asyncio.run(_capture(_page_ws_url(port), url, settle_s, timeout_s))
        finally:
            stop(browser)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_bytes(png)
    os.replace(tmp, out)


def stop(proc: subprocess.Popen) -> None:
    """Terminate ``proc``; kill it if it has not exited 10 s later."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--views", nargs="+", default=list(VIEWS), choices=VIEWS)
    parser.add_argument("--query", default="", help="extra query string, e.g. 'device=custom&limit_gib=0.2'")
    parser.add_argument("--suffix", default="", help="appended to each file name, e.g. '-limit'")
    parser.add_argument("--size", default="1400,1000", help="window size W,H")
    parser.add_argument("--settle-s", type=float, default=2.0, help="wait after the app is ready")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="give up on a view after this long")
    args = parser.parse_args(argv)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true", "--browser.gatherUsageStats", "false"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_healthy(port)
        for view in args.views:
            query = f"view={quote(view)}" + (f"&{args.query}" if args.query else "")
            out = args.out / f"{slug(view)}{args.suffix}.png"
            shoot(f"http://127.0.0.1:{port}/?{query}", out, args.size, args.settle_s, args.timeout_s)
            print(f"{view}: {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    finally:
        stop(server)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
