#!/usr/bin/env python
"""Screenshot a .tflite in Model Explorer with a node-data overlay, headless (no display, no browser window).

1. the overlay: --overlay JSON, or `python -m litert_gpu_toolkit check MODEL --explorer DIR` run here (the
   residency overlay: per op GPU / CPU and why);
2. `model-explorer MODEL --node_data_paths=OVERLAY --no_open_in_browser` on a free local port
   (pip install ai-edge-model-explorer);
3. headless Chromium driven over the Chrome DevTools protocol (a small WebSocket client below: no extra package):
   open the page Model Explorer prints, wait until the graph is drawn and the overlay has loaded, let it settle,
   write a PNG.

    python scripts/explorer_screenshot.py model.tflite                      # -> model.explorer.png next to it
    python scripts/explorer_screenshot.py model.tflite --overlay ov.json --out /tmp/shot.png --size 1920x1200

The PNG is a build output: do not commit it. Exit status: 0 written, 1 the page never finished loading (a
screenshot of what was there is still written), 2 usage error (missing file, no chromium / model-explorer).
"""
from __future__ import annotations

import argparse
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class DevTools:
    """Just enough of RFC 6455 to speak CDP with one page: masked text frames out, whole frames in."""

    def __init__(self, ws_url: str, timeout: float = 60.0):
        m = re.match(r"ws://([^:/]+):(\d+)(/.*)", ws_url)
        if not m:
            raise ValueError(f"unexpected DevTools URL {ws_url}")
        self.sock = socket.create_connection((m.group(1), int(m.group(2))), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {m.group(3)} HTTP/1.1\r\nHost: {m.group(1)}:{m.group(2)}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                           ).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("DevTools closed the connection during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the WebSocket: {head[:200]!r}")
        self.buffer = head.split(b"\r\n\r\n", 1)[1]
        self.next_id = 0

    def _read(self, n: int) -> bytes:
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("DevTools closed the connection")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def _frame(self) -> tuple[bool, int, bytes]:
        b0, b1 = self._read(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack(">H", self._read(2))[0]
        elif n == 127:
            n = struct.unpack(">Q", self._read(8))[0]
        return bool(b0 & 0x80), b0 & 0x0F, self._read(n)

    def _message(self) -> dict:
        parts = []
        while True:
            fin, opcode, data = self._frame()
            if opcode == 0x8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0x0, 0x1):   # text, or the continuation of a fragmented one
                parts.append(data)
                if fin:
                    return json.loads(b"".join(parts))

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        payload = json.dumps({"id": self.next_id, "method": method, "params": params}).encode()
        header = bytes([0x81])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
        while True:   # skip events until our answer
            msg = self._message()
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True).get("result", {}).get("value")


def wait_http(url: str, timeout: float) -> str:
    end = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read().decode()
        except OSError:
            if time.monotonic() > end:
                raise TimeoutError(f"nothing answered at {url} within {timeout:.0f} s") from None
            time.sleep(0.5)


# the page is ready when the graph canvas exists, the model picker is gone and no progress spinner is left
READY_JS = """(() => {
  const text = document.body ? document.body.innerText : '';
  const spinners = document.querySelectorAll('mat-spinner, mat-progress-spinner, .mat-mdc-progress-spinner');
  return !!document.querySelector('canvas') && !text.includes('Select Models') && spinners.length === 0;
})()"""


def make_overlay(model: Path, folder: Path) -> Path:
    """`litert_gpu_toolkit check MODEL --explorer folder`: the residency overlay."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "utilities"),
                                                                    os.environ.get("PYTHONPATH")]))}
    subprocess.run([sys.executable, "-m", "litert_gpu_toolkit", "check", str(model), "--explorer", str(folder)],
                   check=False, env=env, stdout=subprocess.DEVNULL)
    found = sorted(folder.glob("*.json"))
    if not found:
        raise SystemExit(f"explorer_screenshot.py: error: the checker wrote no overlay for {model}")
    return found[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model", type=Path, help="the .tflite to show")
    p.add_argument("--overlay", type=Path, default=None,
                   help="Model Explorer node-data JSON (default: run the checker's --explorer on the model)")
    p.add_argument("--out", type=Path, default=None, help="the PNG to write (default: <model>.explorer.png)")
    p.add_argument("--size", default="1600x1000", help="browser window WIDTHxHEIGHT (default 1600x1000)")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the page (default 120)")
    p.add_argument("--settle", type=float, default=3.0, help="seconds to wait once it looks ready (default 3)")
    p.add_argument("--chromium", default=None, help="the browser binary (default: chromium / google-chrome on PATH)")
    args = p.parse_args()
    if not args.model.is_file():
        p.error(f"{args.model} not found")
    if args.overlay is not None and not args.overlay.is_file():
        p.error(f"{args.overlay} not found")
    if not re.fullmatch(r"\d+x\d+", args.size):
        p.error("--size is WIDTHxHEIGHT, e.g. 1600x1000")
    browser = args.chromium or next((b for b in ("chromium", "chromium-browser", "google-chrome")
                                     if shutil.which(b)), None)
    explorer = shutil.which("model-explorer") or str(Path(sys.executable).with_name("model-explorer"))
    if not browser or not shutil.which(browser):
        p.error("no chromium on PATH (apt-get install chromium, or --chromium PATH)")
    if not Path(explorer).exists():
        p.error("no model-explorer (pip install ai-edge-model-explorer)")
    out = args.out or args.model.with_suffix(".explorer.png")
    width, height = args.size.split("x")

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        overlay = args.overlay or make_overlay(args.model, tmp / "overlay")
        port, cdp_port = free_port(), free_port()
        server = subprocess.Popen([explorer, str(args.model.resolve()), f"--node_data_paths={overlay.resolve()}",
                                   "--no_open_in_browser", "--host", "127.0.0.1", "--port", str(port)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        chrome = None
        try:
            url, seen = None, []
            end = time.monotonic() + args.timeout
            while url is None:   # the server prints the page's URL (the model and overlay in its `data` query)
                line = server.stdout.readline()
                if not line:
                    if server.poll() is not None or time.monotonic() > end:
                        raise SystemExit("explorer_screenshot.py: error: model-explorer exited:\n" + "".join(seen))
                    continue
                seen.append(line)
                m = re.search(r"(http://127\.0\.0\.1:\d+/\?data=\S+)", line)
                url = m.group(1) if m else None
            chrome = subprocess.Popen([browser, "--headless=new", "--no-sandbox", "--use-angle=swiftshader",
                                       "--enable-unsafe-swiftshader", f"--window-size={width},{height}",
                                       f"--remote-debugging-port={cdp_port}", f"--user-data-dir={tmp / 'profile'}",
                                       "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            pages = json.loads(wait_http(f"http://127.0.0.1:{cdp_port}/json/list", 30))
            page = next(t for t in pages if t.get("type") == "page")
            tools = DevTools(page["webSocketDebuggerUrl"], timeout=args.timeout)
            tools.call("Page.enable")
            tools.call("Emulation.setDeviceMetricsOverride", width=int(width), height=int(height),
                       deviceScaleFactor=1, mobile=False)
            tools.call("Page.navigate", url=url)
            ready = False
            while time.monotonic() < end and not ready:
                time.sleep(1.0)
                ready = bool(tools.evaluate(READY_JS))
            time.sleep(args.settle)
            shot = tools.call("Page.captureScreenshot", format="png")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(base64.b64decode(shot["data"]))
        finally:
            for proc in (chrome, server):
                if proc is not None and proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
    print(f"wrote {out} ({out.stat().st_size / 1e3:.0f} kB)" + ("" if ready else
          f"; the page did not finish loading within {args.timeout:.0f} s (a screenshot of what was there)"))
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main())
