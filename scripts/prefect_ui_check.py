"""The Prefect UI, checked in a real headless browser: each batch a task run, paused time counted,
artifacts that fit the page. Run by hand (CI installs no browser), or as
``ROLLOUT_UI_CHECK=1 pytest tests/test_ui_check.py``; the last result is in docs/ui-check.md (a
test checks it passed), its screenshots in docs/ui/ (not kept in git).

    apt-get install -y chromium          # Debian's; the DevTools protocol needs no driver
    .venv/bin/python scripts/prefect_ui_check.py [--out docs]

What it does, as a user would: ``kubesim up`` (20x clock, general and legacy hosts), a real
``prefect server start``, then two rehearsals with ``rollout start --time-scale 20`` through the
CLI: ``ui-good`` (canary, an approval gate after it answered ~20 s later with ``rollout approve``,
then the other batches) and ``ui-crashloop`` (a config the legacy hosts cannot run: the canary
crash-loops and its batch is reverted). Then Chromium at 1440x1000 opens each flow run, its task
runs and its artifacts, and checks:

- each batch is a task run (``batch 1 (canary)``, ...) with its own page, and the run graph draws them;
- the report's duration counts the time paused at the gate (Prefect's own duration leaves it out);
- no table of an artifact is wider than the page shows (the UI clips it, it does not wrap it);
- the report's heading is plain text (an emoji rendered as a missing glyph).

Exit 0 when every check passes. Every process it starts is its own child and ends with it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from headless_browser import Browser  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
TIME_SCALE = 20
GATE_WAIT_S = 20
CLUSTER = """\
apiVersion: kubesim.kubelet-rollout.io/v1
kind: Cluster
pools:
  - {name: control-plane, count: 1, controlPlane: true}
  - {name: general, count: 4, host: {cgroups: ["/", "/kubepods", "/system.slice"]}}
  - {name: legacy, count: 2, host: {cgroups: ["/", "/kubepods"]}}
"""
CRASHLOOP = {"systemReserved": {"cpu": "500m", "memory": "512Mi"}, "systemReservedCgroup": "/system.slice",
             "enforceNodeAllocatable": ["pods", "system-reserved"]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def process(args: list[str], *, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def wait_until(what: str, check: Any, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            value = check()
            if value:
                return value
        time.sleep(0.5)
    raise SystemExit(f"timed out waiting for {what}")


def api(url: str, path: str, body: Any) -> Any:
    request = urllib.request.Request(f"{url}{path}", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request) as answer:  # noqa: S310 - the local server
        return json.load(answer)


def rollout(*args: str, env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "rollout"), *args], env=env, text=True, capture_output=True, timeout=timeout)


def run_rollouts(work: Path, env: dict[str, str]) -> None:
    exported = rollout("export", "general-1", env=env)
    assert exported.returncode == 0, exported.stderr
    base = yaml.safe_load(exported.stdout)
    good, bad = work / "good.yaml", work / "crashloop.yaml"
    good.write_text(yaml.safe_dump({**base, "maxPods": 90}, sort_keys=False))
    bad.write_text(yaml.safe_dump({**base, "maxPods": 91, **CRASHLOOP}, sort_keys=False))
    policy = work / "gated.yaml"
    policy.write_text(yaml.safe_dump({"name": "gated", "steps": [1, "50%", "100%"], "maxUnavailable": 2,
                                      "done": {"soak": "2m"}, "approval": {"after": [0], "timeout": "1h"},
                                      "failureAction": "revert-batch", "allowFields": sorted(CRASHLOOP)}))
    started = subprocess.Popen([str(BIN / "rollout"), "start", "--config", str(good), "--policy", str(policy),
                                "--name", "ui-good", "--time-scale", str(TIME_SCALE)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wait_until("the approval gate", lambda: json.loads(rollout("approve", "-o", "json", env=env).stdout or "[]"))
    time.sleep(GATE_WAIT_S)  # a person reads the evidence
    approved = rollout("approve", "ui-good", "--approver", "ui-check", "-m", "canary looks good", env=env)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    output = started.communicate(timeout=600)[0]
    assert started.returncode == 0, output[-3000:]
    crash = rollout("start", "--config", str(bad), "--policy", str(policy), "--name", "ui-crashloop",
                    "--time-scale", str(TIME_SCALE), "-l", "kubesim.kubelet-rollout.io/pool=legacy", env=env)
    assert crash.returncode == 1, crash.stdout[-3000:] + crash.stderr[-3000:]
    # a gate waits 1h (3m at x20): the crash loop reverts its canary before it asks


def check_ui(url: str, shots: Path) -> list[tuple[str, bool, str]]:
    results: list[tuple[str, bool, str]] = []

    def record(check: str, ok: bool, detail: str) -> None:
        results.append((check, ok, detail))
        print(("PASS " if ok else "FAIL ") + check + (f": {detail}" if detail else ""), flush=True)

    runs = {r["name"]: r for r in api(url, "/flow_runs/filter", {"limit": 20})}
    with Browser(width=1440, height=1000) as browser:
        for name in ("ui-good", "ui-crashloop"):
            run = runs[name]
            tasks = api(url, "/task_runs/filter", {"flow_runs": {"id": {"any_": [run["id"]]}}})
            batches = sorted(t["name"] for t in tasks if t["name"].startswith("batch "))
            browser.goto(f"{url.removesuffix('/api')}/runs/flow-run/{run['id']}")
            browser.wait_for("document.body.innerText.includes('Task Runs')", what="the flow run page")
            time.sleep(4)  # the graph draws on a canvas: give it its frames
            browser.screenshot(shots / f"{name}-graph.png")
            # each batch's own task-run page: what a person opens from the graph (the graph is a canvas)
            shown = []
            for task in sorted((t for t in tasks if t["name"].startswith("batch ")), key=lambda t: t["name"]):
                browser.goto(f"{url.removesuffix('/api')}/runs/task-run/{task['id']}")
                with contextlib.suppress(TimeoutError):
                    browser.wait_for(f"document.body.innerText.includes({json.dumps(task['name'])})",
                                     what=f"task run {task['name']}", timeout=30)
                    shown.append(task["name"])
            browser.screenshot(shots / f"{name}-task-run.png")
            record(f"{name}: a task run per batch, each with its own page",
                   bool(batches) and shown == batches, ", ".join(shown) or "none shown")
            arts = api(url, "/artifacts/filter", {"artifacts": {"flow_run_id": {"any_": [run["id"]]},
                                                                "type": {"any_": ["markdown", "table"]}}})
            for art in sorted(arts, key=lambda a: a["key"] or ""):
                browser.goto(f"{url.removesuffix('/api')}/artifacts/artifact/{art['id']}")
                browser.wait_for("document.querySelectorAll('table').length > 0", what=f"artifact {art['key']}")
                time.sleep(1)
                widths = browser.js("[...document.querySelectorAll('table')].map(t => { let c = t.parentElement; "
                                    "while (c && c.clientWidth >= t.scrollWidth && c !== document.body) c = c.parentElement; "
                                    "const box = t.closest('main') || document.body; "
                                    "return [t.scrollWidth, Math.min(t.parentElement.clientWidth, box.clientWidth)]; })")
                clipped = [w for w in widths if w[0] > w[1] + 1]
                browser.screenshot(shots / f"{art['key']}.png", full_page=art["type"] == "markdown")
                record(f"{art['key']}: every table fits the page", not clipped,
                       f"{len(widths)} table(s)" + (f"; wider than shown: {clipped}" if clipped else ""))
                if art["type"] == "markdown" and art["key"].endswith("-report"):
                    heading = browser.js("document.querySelector('h1')?.innerText || ''")
                    record(f"{art['key']}: the heading is plain text", heading.isascii() and "Rollout" in heading,
                           heading)
        report = api(url, "/artifacts/filter", {"artifacts": {"key": {"any_": ["ui-good-report"]}}})[0]["data"]
        line = next((ln for ln in report.splitlines() if ln.startswith("* duration:")), "")
        prefect_s = runs["ui-good"]["total_run_time"]
        record("ui-good: the report's duration counts the time paused at the gate",
               "waiting at approval gates" in line, f"{line.removeprefix('* ')}; Prefect's duration: {prefect_s:.0f}s")
    return results


def write_results(results: list[tuple[str, bool, str]], out: Path, seconds: float) -> None:
    rows = "\n".join(f"| {'pass' if ok else 'FAIL'} | {check} | {detail} |" for check, ok, detail in results)
    shots = sorted(p.name for p in (out / "ui").glob("*.png"))
    (out / "ui-check.md").write_text(f"""# The Prefect UI, checked in a browser

The last result of `scripts/prefect_ui_check.py` (headless Chromium at 1440x1000 against a real
`prefect server start`, after two rehearsals on kubesim with `rollout start --time-scale {TIME_SCALE}`);
run it again after a change to what a run shows in Prefect. Prefect counts a run's time only while it
runs: the time it waits paused at an approval gate is not in its "Duration", and the report says how
long that was.

Run at {datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, {seconds:.0f} s.

| result | check | detail |
|---|---|---|
{rows}

Screenshots: `ui/*.png` next to this file after a run ({len(shots)} this time; not kept in git: run
the script to see them).
""")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where ui-check.md and ui/*.png go")
    args = parser.parse_args()
    began = time.monotonic()
    (args.out / "ui").mkdir(parents=True, exist_ok=True)
    for old in (args.out / "ui").glob("*.png"):
        old.unlink()
    work = Path(tempfile.mkdtemp(prefix="ui-check-"))
    (work / "cluster.yaml").write_text(CLUSTER)
    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "PREFECT_API_URL": url, "PREFECT_UI_API_URL": url,
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT": "false",
           "KUBECONFIG": str(work / "kc")}
    with process([str(BIN / "kubesim"), "up", "--cluster", str(work / "cluster.yaml"), "--kubeconfig",
                  str(work / "kc"), "--state-dir", str(work / "st"), "--time-scale", str(TIME_SCALE)],
                 env=env, log=work / "kubesim.log"), \
            process([str(BIN / "prefect"), "server", "start", "--port", str(port)], env=env, log=work / "prefect.log"):
        wait_until("kubesim", lambda: "kubesim ready" in (work / "kubesim.log").read_text())
        wait_until("the Prefect server", lambda: urllib.request.urlopen(f"{url}/health").read() == b"true")
        run_rollouts(work, env)
        results = check_ui(url, args.out / "ui")
    write_results(results, args.out, time.monotonic() - began)
    print(f"{sum(ok for _, ok, _ in results)}/{len(results)} checks passed; {args.out / 'ui-check.md'}")
    if all(ok for _, ok, _ in results):
        shutil.rmtree(work, ignore_errors=True)  # kept after a failure: its logs say why
        return 0
    print(f"logs of kubesim, Prefect and the runs: {work}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
