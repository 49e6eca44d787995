"""The MLflow UI server and the browser pages the screenshot check looks at (lab/mlflow_screenshot.py): starting and
stopping `mlflow ui`, the runs through its REST API, and taking, cropping and shrinking a page's screenshot. Standard
library only (Pillow where it is installed), so that any Python with playwright runs the check."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SAMPLES_COLUMNS = ("iteration", "phase", "agent", "role", "query", "response", "score", "prompt")
"""cory.tracking.samples_table's columns (not imported: this script runs without the project's packages)."""


def default_profile() -> str:
    """params.yaml's `profile` (the profile `dvc repro` last ran), read without a YAML parser."""
    params = PROJECT_ROOT / "params.yaml"
    if params.is_file():
        match = re.search(r"^profile:\s*(\S+)", params.read_text(), re.MULTILINE)
        if match:
            return match.group(1)
    return "default"


def default_mlflow() -> str:
    venv = PROJECT_ROOT / ".venv" / "bin" / "mlflow"
    return str(venv) if venv.exists() else (shutil.which("mlflow") or "mlflow")


# The UI server

def start_ui(mlflow: str, uri: str, port: int, log: Path) -> subprocess.Popen:
    """`mlflow ui` in its own process group (its workers are stopped with it)."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    command = [mlflow, "ui", "--backend-store-uri", uri, "--host", "127.0.0.1", "--port", str(port)]
    print("starting:", " ".join(command), file=sys.stderr)
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=PROJECT_ROOT,
                            start_new_session=True)


def wait_for(base: str, server: subprocess.Popen, timeout: float, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"mlflow ui exited with status {server.returncode} (its output: {log})")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    raise TimeoutError(f"mlflow ui did not answer on {base} within {timeout:.0f} s (its output: {log})")


def stop_ui(server: subprocess.Popen) -> None:
    if server.poll() is None:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def api(base: str, path: str, body: dict | None = None) -> dict:
    url = f"{base}/api/2.0/mlflow/{path}"
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


def current_runs(base: str, experiment_id: str) -> list[dict]:
    """Every run of the experiment not superseded by a newer run of its key (cory.tracking)."""
    runs, token = [], None
    while True:
        page = api(base, "runs/search", {"experiment_ids": [experiment_id], "max_results": 1000,
                                         **({"page_token": token} if token else {})})
        runs += page.get("runs", [])
        token = page.get("next_page_token")
        if not token:
            break
    for run in runs:
        run["tags"] = {tag["key"]: tag["value"] for tag in run.get("data", {}).get("tags", [])}
        run["metrics"] = {m["key"]: m["value"] for m in run.get("data", {}).get("metrics", [])}
        run["params"] = {p["key"]: p["value"] for p in run.get("data", {}).get("params", [])}
    return [run for run in runs if run["tags"].get("superseded") != "true"]


# The browser

class Checks:
    def __init__(self):
        self.failed: list[str] = []

    def __call__(self, ok: bool, what: str) -> None:
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            self.failed.append(what)


def settle(page, seconds: float = 2.0) -> None:
    """The UI polls its server, so the page is never network-idle: wait for its spinners, then a little more."""
    try:
        page.wait_for_function("() => !document.querySelector('[class*=spinner], [aria-busy=true]')", timeout=15000)
    except Exception:  # noqa: BLE001 - a spinner that stays is shown in the screenshot
        pass
    page.wait_for_timeout(seconds * 1000)


def close_assistant(page) -> None:
    """MLflow 3 opens its assistant panel on the right of every page: close it to give the page the width."""
    close = page.locator("button[aria-label='Close']")
    if close.count():
        close.first.click()
        page.wait_for_timeout(500)


def full_page(page, path: Path) -> bytes:
    """A screenshot of the whole page. MLflow's pages scroll inside <main>, not the window, so the viewport is first
    made as tall as <main>'s content."""
    height = page.evaluate("() => { const m = document.querySelector('main'); if (!m) return 0; m.scrollTop = 0; "
                           "return m.scrollHeight + m.getBoundingClientRect().top + 16 }")
    viewport = page.viewport_size
    if height > viewport["height"]:
        page.set_viewport_size({"width": viewport["width"], "height": min(int(height), 12000)})
        page.wait_for_timeout(1500)
    shot = page.screenshot(path=str(path), full_page=True)
    page.set_viewport_size(viewport)
    print(f"wrote {path}", file=sys.stderr)
    return shot


def shrink_png(shot: bytes, max_kb: int) -> bytes:
    """The PNG at most max_kb: reduced to 256 colours, then halved in width until it fits (needs Pillow)."""
    if len(shot) <= max_kb * 1024:
        return shot
    try:
        from PIL import Image
    except ImportError:
        print(f"WARNING: Pillow is not installed: the screenshot stays {len(shot) // 1024} KB", file=sys.stderr)
        return shot
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    while True:
        buffer = io.BytesIO()
        image.quantize(256, method=Image.Quantize.MEDIANCUT).save(buffer, "PNG", optimize=True)
        if buffer.tell() <= max_kb * 1024 or image.width < 600:
            return buffer.getvalue()
        image = image.resize((image.width * 3 // 4, image.height * 3 // 4), Image.Resampling.LANCZOS)


def crop_png(shot: bytes, height: float) -> bytes:
    """The top `height` pixels of a screenshot (all of it without Pillow or a height)."""
    try:
        from PIL import Image
    except ImportError:
        return shot
    image = Image.open(io.BytesIO(shot))
    if not height or height >= image.height:
        return shot
    buffer = io.BytesIO()
    image.crop((0, 0, image.width, int(height))).save(buffer, "PNG", optimize=True)
    return buffer.getvalue()


def text(page, *wanted: str, timeout: float = 20) -> str:
    """The page's text, once it holds every one of `wanted` (or after `timeout` seconds: the check then fails)."""
    deadline = time.monotonic() + timeout
    while True:
        body = page.inner_text("body")
        if all(item in body for item in wanted) or time.monotonic() > deadline:
            return body
        page.wait_for_timeout(500)
