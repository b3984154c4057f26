"""Live delivery benchmark: write→deliver latency through the multiplexed SSE watch
(API §7) and the WebSocket data plane (API §8), and writer throughput with watchers
attached, against a real `python -m seglog.server` on loopback.

1. Generator ceilings, same run: the reader code of `live_clients.py` against a trivial
   asyncio server that pushes pre-built SSE frames / WebSocket messages (same shapes as
   seglog's) as fast as one client process drains them; frames/s and records/s with
   1-record and 64-record frames (and count-only readers with 256-record frames). The
   writer loop against the same server, unpaced (requests/s).
2. Latency matrix: for each transport (sse, ws) × durability class (memory, disk, fsync)
   × watchers (0, 1, 10, 100, 1000): a fresh topic, N readers attached from seq 0, then one
   writer appends single records at 1 record/ms (open loop: the keep-alive connection used
   last while its ack is back, else another of a pool of 8), each stamped with
   `time.time_ns()` just before its send. Readers compute receive − send per record.
   Warm-up excluded: only records *sent* inside the measurement window count. The
   0-watcher cell (writer alone, per class) is the same-run baseline.
   `/v0/metrics` (JSON `delivery` block) is polled every 0.5 s for the pressure level.
   The box is shared: each cell waits for a quiet second first, records the CPU others
   used during it, and is taken again once if that exceeded OTHER_LIMIT.
3. Writer throughput: wrk (8 connections, batches of 100 × 100 B, `disk` topic) with no
   watcher, then with 100 SSE watchers that consume everything (count-only readers),
   then with none again; afterwards every watcher must have received every record.

usage: python benchmarks/bench_live.py [--quick] [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_http import POST_LUA, SUMMARY_LUA, free_port, http, wait_up

CLIENTS = str(Path(__file__).resolve().parent / "live_clients.py")
PY = sys.executable
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICK  # utime, stime (fields 14, 15)


def machine_busy() -> tuple[int, int, int]:
    """(busy, steal, total) jiffies summed over all CPUs, from /proc/stat. Busy is user +
    nice + system + irq + softirq (loopback networking runs partly in softirq, charged to
    no process); steal is time the hypervisor gave to other tenants."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = v
    return user + nice + system + irq + softirq, steal, sum(v)


def busy_cores(a: tuple[int, int, int], b: tuple[int, int, int], i: int = 0) -> float:
    total = b[2] - a[2]
    return round((b[i] - a[i]) / total * (os.cpu_count() or 1), 2) if total else 0.0


OTHER_LIMIT = 0.35  # cores used by others that make a cell suspect


def wait_quiet(limit_s: float) -> float:
    """Wait (up to `limit_s`) until the box is idle while this benchmark is: the machine is
    shared, and another tenant's burst would be measured as seglog's. Returns seconds
    waited."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        a = machine_busy()
        time.sleep(0.5)
        if busy_cores(a, machine_busy()) < 0.25:
            break
    return round(time.time() - t0 - 0.5, 1)


def metrics(base: str) -> dict[str, Any]:
    req = urllib.request.Request(f"{base}/v0/metrics", headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())  # type: ignore[no-any-return]


class Child:
    """A `live_clients.py` process spoken to over stdin/stdout JSON lines."""

    def __init__(self, role: str, **kw: object) -> None:
        args = [PY, CLIENTS, role] + [f"{k}={v}" for k, v in kw.items()]
        self.p = subprocess.Popen(
            args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def read(self, timeout: float = 300) -> dict[str, Any]:
        import select

        assert self.p.stdout is not None
        r, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not r:
            raise TimeoutError("child did not answer")
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"child exited (rc={self.p.wait()})")
        return json.loads(line)  # type: ignore[no-any-return]

    def send(self, line: str) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def close(self) -> None:
        try:
            self.send("quit")
        except (BrokenPipeError, OSError):
            pass
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def split(n: int, parts: int) -> list[int]:
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def procs_for(n: int) -> int:
    return 1 if n <= 10 else 2


def wait_streams_closed(base: str, timeout: float = 20) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if metrics(base)["sse_connections"] == 0:
            return
        time.sleep(0.1)
    print("  (warning: server still counts open streams)")


# --------------------------------------------------------------------------------------
# 1. generator ceilings


def ceilings(seconds: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ("sse", "ws"):
        for per_frame, conns, sample_every in ((1, 10, 1), (64, 10, 1), (256, 10, 0)):
            wait_quiet(30)
            port = free_port()
            delay = 2.0
            fake = Child("fake", port=port, per_frame=per_frame, delay=delay)
            fake.read(30)
            t_go = time.time() + delay
            w = Child("watch", kind=kind, port=port, topic="t", n=conns, sample_every=sample_every)
            try:
                w.read(60)
                time.sleep(max(0.0, t_go - time.time()) + 0.5)
                w.send("snap")
                a = w.read()
                time.sleep(seconds)
                w.send("snap")
                b = w.read()
            finally:
                w.close()
                fake.p.send_signal(signal.SIGTERM)
                fake.p.wait(10)
            dt = b["t"] - a["t"]
            mode = "count-only" if sample_every == 0 else "timestamped"
            key = f"{kind}_{per_frame}rec_{mode}"
            out[key] = {
                "frames_per_s": round((b["frames"] - a["frames"]) / dt),
                "records_per_s": round((b["records"] - a["records"]) / dt),
                "mb_per_s": round((b["bytes"] - a["bytes"]) / dt / 1e6, 1),
                "client_cpu": round((b["cpu_s"] - a["cpu_s"]) / dt, 2),
                "connections": conns,
            }
            print(
                f"ceiling {kind:3} {per_frame:3}-record frames, {mode:11}, {conns} conns, 1 proc: "
                f"{out[key]['frames_per_s']:>9,} frames/s {out[key]['records_per_s']:>10,} rec/s "
                f"({out[key]['mb_per_s']} MB/s, client CPU {out[key]['client_cpu']:.2f})"
            )
    port = free_port()
    fake = Child("fake", port=port)
    fake.read(30)
    w = Child("write_ceiling", port=port, seconds=seconds)
    out["writer_req_per_s"] = round(w.read(60)["req_per_s"])
    w.p.wait(10)
    fake.p.send_signal(signal.SIGTERM)
    fake.p.wait(10)
    print(f"ceiling writer loop (unpaced, 1 conn): {out['writer_req_per_s']:,} req/s")
    return out


# --------------------------------------------------------------------------------------
# 2. latency matrix


def start_py_spy(args: argparse.Namespace, pid: int, name: str) -> subprocess.Popen | None:
    """py-spy over the measured window (after the writer's warm-up) of one cell."""
    if args.py_spy is None:
        return None
    args.py_spy.mkdir(parents=True, exist_ok=True)
    spy = shutil.which("py-spy") or str(Path(PY).parent / "py-spy")
    time.sleep(args.warmup)
    return subprocess.Popen(
        [
            spy,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(int(args.seconds)),
            "--rate",
            "200",
            "--nonblocking",
            "--format",
            "raw",
            "-o",
            str(args.py_spy / f"{name}.txt"),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def latency_cell(
    base: str,
    port: int,
    srv_pid: int,
    kind: str,
    cls: str,
    n: int,
    args: argparse.Namespace,
    tmp: Path,
) -> dict[str, Any]:
    topic = f"lat-{kind}-{cls}-{n}"
    http("PUT", f"{base}/v0/topics/{topic}", {"durability": cls})
    sample_every = args.sample_every_1000 if n >= 1000 else 1
    kids = [
        Child("watch", kind=kind, port=port, topic=topic, n=k, sample_every=sample_every)
        for k in (split(n, procs_for(n)) if n else [])
    ]
    cell: dict[str, Any] = {"transport": kind, "class": cls, "watchers": n}
    try:
        t_att = time.time()
        for c in kids:
            c.read(300)
        cell["attach_s"] = round(time.time() - t_att, 2)
        m0 = metrics(base)
        for c in kids:
            c.send("snap")
        s0 = [c.read() for c in kids]
        cpu0 = proc_cpu_s(srv_pid)
        busy0 = machine_busy()
        t_run0 = time.time()
        writer = Child(
            "write", port=port, topic=topic, rate=1000, warmup=args.warmup, duration=args.seconds
        )
        spy = start_py_spy(args, srv_pid, f"{kind}-{cls}-{n}")
        levels: list[int] = []
        lags: list[int] = []
        while writer.p.poll() is None:
            time.sleep(0.5)
            if writer.p.poll() is not None:
                break
            d = metrics(base)["delivery"]
            levels.append(d["pressure_level"])
            lags.append(d["lag_ms"])
        w = writer.read(30)
        if spy is not None:
            spy.wait(60)
        cpu1 = proc_cpu_s(srv_pid)
        busy1 = machine_busy()
        t_run1 = time.time()
        for c in kids:
            c.send("snap")
        s1 = [c.read() for c in kids]
        for i, c in enumerate(kids):
            req = {
                "last_seq": w["last_seq"],
                "t0": w["t0"],
                "t1": w["t1"],
                "timeout": 60,
                "npy": str(tmp / f"lat{i}.npy"),
            }
            c.send("finish " + json.dumps(req))
        fin = [c.read(120) for c in kids]
        m1 = metrics(base)
    finally:
        for c in kids:
            c.close()
    lat = (
        np.concatenate([np.load(tmp / f"lat{i}.npy") for i in range(len(kids))] or [np.zeros(0)])
        / 1e6
    )
    dt = t_run1 - t_run0
    frames = sum(b["frames"] - a["frames"] for a, b in zip(s0, s1, strict=True))
    records = sum(b["records"] - a["records"] for a, b in zip(s0, s1, strict=True))
    d0, d1 = m0["delivery"], m1["delivery"]
    cell.update(
        {
            "samples": int(lat.size),
            "sampled_watchers": sum(f["sampled_readers"] for f in fin),
            "p50_ms": round(float(np.percentile(lat, 50)), 3) if lat.size else None,
            "p99_ms": round(float(np.percentile(lat, 99)), 3) if lat.size else None,
            "p999_ms": round(float(np.percentile(lat, 99.9)), 3) if lat.size else None,
            "max_ms": round(float(lat.max()), 3) if lat.size else None,
            "written": w["last_seq"],
            "write_rate": round(w["window_rate"], 1),
            "writer_ack_p50_ms": w["ack_p50_ms"],
            "writer_ack_p99_ms": w["ack_p99_ms"],
            "writer_max_late_ms": round(w["max_late_ms"], 1),
            "writer_max_in_flight": w["max_in_flight"],
            "writer_connections_used": w["connections_used"],
            "complete_watchers": sum(f["complete"] for f in fin),
            "min_records_per_watcher": min((f["min_records"] for f in fin), default=None),
            "records_per_frame": round(records / frames, 2) if frames else None,
            "frames_per_s": round(frames / dt),
            "deliveries_per_s": round(records / dt),
            "server_cpu": round((cpu1 - cpu0) / dt, 2),
            "machine_busy_cores": busy_cores(busy0, busy1),
            "steal_cores": busy_cores(busy0, busy1, 1),
            "generator_cpu": round(
                sum(b["cpu_s"] - a["cpu_s"] for a, b in zip(s0, s1, strict=True)) / dt
                + w["cpu_s"] / dt,
                2,
            ),
            "pressure_level_max": max(levels, default=m1["delivery"]["pressure_level"]),
            "lag_ms_max_polled": max(lags, default=0),
            "delivery_max_wait_ms": d1["max_wait_ms"],
            "coalesced_share": round(
                (d1["coalesced"] - d0["coalesced"]) / max(d1["marked"] - d0["marked"], 1), 3
            ),
            "throttled_writes": d1["throttled_writes"] - d0["throttled_writes"],
            "fanout": {k: v - d0["fanout"][k] for k, v in d1["fanout"].items()},
        }
    )
    # CPU of everything else on the box (other tenants' processes, kernel work charged to
    # no process): a cell with a large figure shared its cores with a stranger.
    cell["other_cpu"] = round(
        cell["machine_busy_cores"] - cell["server_cpu"] - cell["generator_cpu"], 2
    )
    ok = cell["complete_watchers"] == n and (
        n == 0 or cell["min_records_per_watcher"] == w["last_seq"]
    )
    cell["every_record_delivered"] = ok
    if n == 0:
        print(
            f"{kind:3} {cls:6}     0 watchers (baseline): writer ack p50 {w['ack_p50_ms']:.3f} ms"
            f"  p99 {w['ack_p99_ms']:.3f} ms  writes {cell['write_rate']:6.1f}/s (in flight "
            f"≤{w['max_in_flight']})  srv CPU {cell['server_cpu']:.2f}"
        )
        return cell
    print(
        f"{kind:3} {cls:6} {n:5} watchers: p50 {cell['p50_ms']:7.3f} ms  p99 {cell['p99_ms']:8.3f} ms"
        f"  n={cell['samples']:>8,}  writes {cell['write_rate']:6.1f}/s  ack p50 "
        f"{w['ack_p50_ms']:.3f} ms (in flight ≤{w['max_in_flight']})  rec/frame {cell['records_per_frame']}  "
        f"level≤{cell['pressure_level_max']}  srv CPU {cell['server_cpu']:.2f}  gen CPU "
        f"{cell['generator_cpu']:.2f}  other {cell['other_cpu']:.2f}  fan-out {cell['fanout']}"
        f"{'' if ok else '  INCOMPLETE'}"
    )
    wait_streams_closed(base)
    return cell


def measured_cell(*a: Any) -> dict[str, Any]:
    """A latency cell, taken again once (after waiting for quiet) if a stranger used more
    than OTHER_LIMIT cores during it; both attempts' figures for that are kept."""
    waited = wait_quiet(60)
    cell = latency_cell(*a)
    cell["quiet_wait_s"] = waited
    if cell["other_cpu"] > OTHER_LIMIT:
        first = cell["other_cpu"]
        waited = wait_quiet(90)
        print(f"  (others used {first:.2f} cores; taking the cell again)")
        cell = latency_cell(*a)
        cell["quiet_wait_s"] = waited
        cell["retried_other_cpu_first"] = first
    return cell


# --------------------------------------------------------------------------------------
# 3. writer throughput with 100 watchers vs none


def wrk_post(tmp: Path, url: str, conns: int, seconds: float, body: bytes, tag: str) -> dict:
    (tmp / f"{tag}.json").write_bytes(body)
    lua = tmp / f"{tag}.lua"
    lua.write_text(POST_LUA.replace("{body}", str(tmp / f"{tag}.json")) + SUMMARY_LUA)
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "-s", str(lua), url]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    s = json.loads(out.strip().splitlines()[-1])
    s["rps"] = s["requests"] / (s["duration_us"] / 1e6)
    return s


def throughput(base: str, port: int, srv_pid: int, args: argparse.Namespace, tmp: Path) -> dict:
    body = json.dumps({"records": [{"data": "y" * 98} for _ in range(100)]}).encode()
    runs: list[dict[str, Any]] = []
    for i, n in enumerate((0, args.thr_watchers, 0)):
        waited = wait_quiet(60)
        topic = f"thr-{i}-{n}"
        http("PUT", f"{base}/v0/topics/{topic}", {"durability": "disk"})
        kids = [
            Child("watch", kind="sse", port=port, topic=topic, n=k, sample_every=0)
            for k in (split(n, procs_for(n)) if n else [])
        ]
        try:
            for c in kids:
                c.read(300)
            for c in kids:
                c.send("snap")
            s0 = [c.read() for c in kids]
            cpu0 = proc_cpu_s(srv_pid)
            busy0 = machine_busy()
            t0 = time.time()
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            s = wrk_post(tmp, f"{base}/v0/topics/{topic}", 8, args.thr_seconds, body, f"w{i}")
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            wrk_cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
            t1 = time.time()
            cpu1 = proc_cpu_s(srv_pid)
            busy1 = machine_busy()
            time.sleep(0.5)  # requests wrk left in flight at its deadline still commit
            head = http("GET", f"{base}/v0/topics/{topic}")["head_seq"]
            run: dict[str, Any] = {
                "watchers": n,
                "records_per_s": round(
                    s["rps"] * 100 * (s["requests"] - s["non2xx"]) / max(s["requests"], 1)
                ),
                "non2xx": s["non2xx"],
                "errors": s["errors"],
                "p50_ms": s["p50_us"] / 1000,
                "p99_ms": s["p99_us"] / 1000,
                "head_seq": head,
                "server_cpu": round((cpu1 - cpu0) / (t1 - t0), 2),
                "machine_busy_cores": busy_cores(busy0, busy1),
                "steal_cores": busy_cores(busy0, busy1, 1),
                "wrk_cpu": round(wrk_cpu / (t1 - t0), 2),
            }
            if kids:
                for c in kids:
                    c.send("snap")
                s1 = [c.read() for c in kids]
                got = sum(b["records"] - a["records"] for a, b in zip(s0, s1, strict=True))
                frames = sum(b["frames"] - a["frames"] for a, b in zip(s0, s1, strict=True))
                run["delivered_during_per_s"] = round(got / (t1 - t0))
                run["records_per_frame"] = round(got / frames, 1) if frames else None
                run["frames_per_s"] = round(frames / (t1 - t0))
                run["generator_cpu"] = round(
                    sum(b["cpu_s"] - a["cpu_s"] for a, b in zip(s0, s1, strict=True)) / (t1 - t0), 2
                )
                run["delivery_at_writers_end"] = metrics(base)["delivery"]
                for c in kids:
                    c.send("finish " + json.dumps({"last_seq": head, "timeout": 300}))
                fin = [c.read(320) for c in kids]
                run["drain_s_after_writers"] = round(time.time() - t1, 2)
                run["delivery_after_drain"] = metrics(base)["delivery"]
                run["complete_watchers"] = sum(f["complete"] for f in fin)
                run["min_records_per_watcher"] = min(f["min_records"] for f in fin)
                run["max_records_per_watcher"] = max(f["max_records"] for f in fin)
                head = http("GET", f"{base}/v0/topics/{topic}")["head_seq"]
                run["head_seq"] = head
                run["every_record_delivered"] = (
                    run["complete_watchers"] == n
                    and run["min_records_per_watcher"] == head
                    and run["max_records_per_watcher"] == head
                    and min(f["min_last_seq"] for f in fin) == head
                )
        finally:
            for c in kids:
                c.close()
        run["quiet_wait_s"] = waited
        run["other_cpu"] = round(
            run["machine_busy_cores"]
            - run["server_cpu"]
            - run["wrk_cpu"]
            - run.get("generator_cpu", 0.0),
            2,
        )
        print(
            f"writer throughput, {n:3} watchers: {run['records_per_s']:>9,} rec/s "
            f"(wrk p50 {run['p50_ms']:.2f} ms, srv CPU {run['server_cpu']:.2f}, "
            f"wrk {run['wrk_cpu']:.2f}, other {run['other_cpu']:.2f})"
            + (
                f"; watchers got {run['delivered_during_per_s']:,} rec/s during, all "
                f"{head:,} after {run['drain_s_after_writers']} s: {run['every_record_delivered']}"
                if n
                else ""
            )
        )
        runs.append(run)
        wait_streams_closed(base)
        http("DELETE", f"{base}/v0/topics/{topic}")
    base_rate = (runs[0]["records_per_s"] + runs[2]["records_per_s"]) / 2
    return {
        "runs": runs,
        "baseline_records_per_s": round(base_rate),
        "ratio_with_watchers": round(runs[1]["records_per_s"] / base_rate, 3),
    }


# --------------------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    model = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "kernel": platform.release(),
        "python": sys.version.split()[0],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smoke run (~1.5 min)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--transports", default="sse,ws")
    ap.add_argument("--classes", default=None, help="default memory,disk,fsync")
    ap.add_argument("--watchers", default=None, help="default 1,10,100,1000")
    ap.add_argument("--skip", default="", help="comma list of: ceiling,latency,throughput")
    ap.add_argument("--seconds", type=float, default=None, help="measured window per cell")
    ap.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        help="record the server with py-spy during each latency cell (flame SVGs here)",
    )
    ap.add_argument(
        "--sample-every-1000",
        type=int,
        default=1,
        help="timestamp every k-th reader at 1,000 watchers (others count)",
    )
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("bench_live needs wrk on the PATH (Debian/Ubuntu: apt-get install wrk)")
    q = args.quick
    args.warmup = 0.5 if q else 2.0
    args.seconds = args.seconds or (2.0 if q else 8.0)
    args.thr_seconds = 3 if q else 10
    args.thr_watchers = 100
    classes = (args.classes or ("memory,fsync" if q else "memory,disk,fsync")).split(",")
    counts = [int(x) for x in (args.watchers or ("0,1,100" if q else "0,1,10,100,1000")).split(",")]
    skip = set(filter(None, args.skip.split(",")))
    result: dict[str, Any] = {
        "machine": machine(),
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    print(json.dumps(result["machine"]))
    t_all = time.time()
    if "ceiling" not in skip:
        result["generator_ceiling"] = ceilings(2.0 if q else 4.0)
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        srv = subprocess.Popen(
            [PY, "-m", "seglog.server", "--port", str(port), "--data-dir", f"{d}/data"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            wait_up(base + "/v0/ready")
            if "latency" not in skip:
                cells = []
                for kind in args.transports.split(","):
                    for cls in classes:
                        for n in counts:
                            if n == 0 and kind != args.transports.split(",")[0]:
                                continue  # the writer-only baseline does not depend on it
                            cells.append(
                                measured_cell(base, port, srv.pid, kind, cls, n, args, tmp)
                            )
                result["latency"] = cells
            if "throughput" not in skip:
                result["throughput"] = throughput(base, port, srv.pid, args, tmp)
                t = result["throughput"]
                print(
                    f"writer throughput ratio, {args.thr_watchers} watchers ÷ none: "
                    f"{t['ratio_with_watchers']:.3f} (baseline {t['baseline_records_per_s']:,})"
                )
            result["router_forwarding"] = None  # measured later (bench_routers.py), not here
        finally:
            srv.send_signal(signal.SIGTERM)
            try:
                srv.wait(20)
            except subprocess.TimeoutExpired:
                srv.kill()
    result["wall_s"] = round(time.time() - t_all, 1)
    print(f"total {result['wall_s']} s")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
