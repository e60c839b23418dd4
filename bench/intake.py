"""``tracescore serve``'s intake rate: spans/s acknowledged durably, and the acknowledgement
latency at a fixed offered rate (docs/otlp.md, BENCHMARKS.md "Session 11 — OTLP intake").

A ``serve`` (in this process: front end, spool, assembler, scoring) on a fresh SQLite file
(or ``--pg``: a throwaway PostgreSQL cluster) receives OTLP/HTTP protobuf requests from
sender *processes* (their own GIL) that replay pre-encoded requests of ``--spans`` spans
each (traces of 10 spans in the GenAI conventions, one record each) over keep-alive
connections:

1. ``max``: ``--senders`` senders as fast as the server answers, for ``--seconds``;
2. ``rate``: one sender offering ``--rate`` spans/s (requests paced on a schedule), for
   ``--seconds``: p50/p99/max of the time from sending a request to its 200 — once on the
   idle server (before the max run) and once while the max run's backlog is assembled and
   scored.

``--procs N``: N ``serve`` processes on one PostgreSQL database vs one (see :func:`_procs`).

Every 200 means the spans were committed. Run nothing else meanwhile.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _requests(n_requests: int, spans: int, seed: int,
              routes: int = 1) -> list[tuple[bytes, list[bytes]]]:
    """Encoded requests with their trace ids (a sender makes each replay unique by writing
    the replay number into the ids' first 4 bytes, zero here). With ``routes`` N (1, 2 or 4)
    every trace of request i has ``trace id mod N == i mod N``: the sender sends request i to
    ``serve`` process i mod N, as a load-balancing exporter routes whole traces by trace id."""
    from test_intake_protocol import genai_request

    out = []
    per_trace = 10
    for i in range(n_requests):
        req = None
        for t in range(max(1, spans // per_trace)):
            tid = (seed * 10_000_000 + i * 1000 + t * routes + i % routes).to_bytes(16, "big")
            one = genai_request(tid, spans="root,retrieval,chat")
            ss = one.resource_spans[0].scope_spans[0]
            # 7 more children (a tool call, embedding, ...): 10 spans per trace
            for k in range(per_trace - 3):
                ss.spans.add(trace_id=tid, span_id=tid[:7] + bytes([0xA0 + k]),
                             parent_span_id=ss.spans[0].span_id, name=f"step {k}",
                             start_time_unix_nano=1500, end_time_unix_nano=1600)
            if req is None:
                req = one
            else:
                req.resource_spans[0].scope_spans[0].spans.extend(ss.spans)
        assert req is not None
        tids = list(dict.fromkeys(sp.trace_id for sp in req.resource_spans[0].scope_spans[0]
                                  .spans))
        out.append((req.SerializeToString(), tids))
    return out


def _sender(port: int | list[int], bodies: list[tuple[bytes, list[bytes]]], seconds: float,
            rate_rps: float | None,
            q: Any) -> None:
    ports = port if isinstance(port, list) else [port]
    conns = [http.client.HTTPConnection("127.0.0.1", p, timeout=60) for p in ports]
    lat: list[float] = []
    ok = refused = 0
    t0 = time.perf_counter()
    i = 0
    while True:
        now = time.perf_counter()
        if now - t0 >= seconds:
            break
        if rate_rps is not None:
            due = t0 + i / rate_rps
            if due > now:
                time.sleep(due - now)
        body, tids = bodies[i % len(bodies)]
        cycle = i // len(bodies)
        if cycle:  # every request new traces: no replay is deduplicated
            head = cycle.to_bytes(4, "big")
            for tid in tids:
                body = body.replace(tid, head + tid[4:])
        s = time.perf_counter()
        conn = conns[i % len(conns)]  # (request i's traces route to process i mod N)
        conn.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
        r = conn.getresponse()
        r.read()
        lat.append(time.perf_counter() - s)
        if r.status == 200:
            ok += 1
        else:
            refused += 1
        i += 1
    q.put({"ok": ok, "refused": refused, "lat": lat, "elapsed": time.perf_counter() - t0})


def _run(port: int | list[int], senders: int, seconds: float, spans: int, rate: float | None,
         seed: int) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = []
    routes = len(port) if isinstance(port, list) else 1
    for k in range(senders):
        bodies = _requests(200, spans, seed * 100 + k, routes)
        procs.append(ctx.Process(target=_sender, args=(
            port, bodies, seconds, None if rate is None else rate / spans, q)))
    for p in procs:
        p.start()
    got = [q.get(timeout=seconds + 120) for _ in procs]
    for p in procs:
        p.join()
    ok = sum(g["ok"] for g in got)
    lat = sorted(x for g in got for x in g["lat"])
    el = max(g["elapsed"] for g in got)

    def pct(p: float) -> float:
        return lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else float("nan")

    return {"requests_ok": ok, "refused": sum(g["refused"] for g in got),
            "spans_per_s": ok * spans / el, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "max_ms": lat[-1] * 1000 if lat else float("nan")}


def _side_by_side(a: Any) -> None:
    """The same ``max`` run (same senders, same pre-encoded requests) against ``serve`` on
    SQLite and against Phoenix's OTLP/HTTP ``/v1/traces``, alternating, on this machine in one
    run: the ratio is what to read. Phoenix answers 200 once the spans are queued in its
    memory (it writes them to its database in the background); ``serve`` once committed."""
    from test_phoenix_integration import PhoenixServer

    import tracescore
    from tracescore.intake import Serve, ServeConfig

    rows: list[tuple[str, int, dict[str, Any]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        phx = PhoenixServer(os.path.abspath(a.phoenix), Path(tmp) / "phoenix")
        phx.start()
        try:
            for k in range(a.rounds):
                db = os.path.join(tmp, f"serve{k}.db")
                ts = tracescore.init(db=db, metrics=["exact_match"])
                serve = Serve(ts, otlp_http=("127.0.0.1", 0),
                              config=ServeConfig(grace_s=1.0)).start()
                assert serve.http_port is not None
                rows.append(("tracescore serve (SQLite, durable ack)", k, _run(
                    serve.http_port, a.senders, a.seconds, a.spans, None, seed=2 * k + 1)))
                serve.stop()
                ts.shutdown(timeout=30)
                rows.append(("Phoenix (in-memory queue ack)", k, _run(
                    phx.port, a.senders, a.seconds, a.spans, None, seed=2 * k + 2)))
        finally:
            phx.stop()
    print("| receiver | round | acked spans/s | p50 ms | p99 ms | refused |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, k, r in rows:
        print(f"| {name} | {k + 1} | {r['spans_per_s']:,.0f} | {r['p50_ms']:.1f} | "
              f"{r['p99_ms']:.1f} | {r['refused']} |")
    ours = [r["spans_per_s"] for n, _, r in rows if n.startswith("tracescore")]
    theirs = [r["spans_per_s"] for n, _, r in rows if n.startswith("Phoenix")]
    ratios = [o / t for o, t in zip(ours, theirs) if t]
    print(f"\nratio ours/Phoenix per round: {[round(x, 2) for x in ratios]}")
    print(f"load average at end (1/5/15 min): {list(os.getloadavg())}")


def _serve_proc(url: str, q: Any, stop: Any) -> None:
    """One ``tracescore serve`` process (front end, spool, assembler, scoring) on ``url``."""
    import tracescore
    from tracescore.intake import Serve, ServeConfig

    ts = tracescore.init(db=url, metrics=["exact_match"])
    serve = Serve(ts, otlp_http=("127.0.0.1", 0), config=ServeConfig(grace_s=1.0)).start()
    q.put(serve.http_port)
    stop.wait()
    stats = serve.stats()
    serve.stop()
    ts.shutdown(timeout=30)
    q.put(stats)


def _cpu_s(pids: list[int]) -> float:
    """User + system CPU seconds of these processes so far (Linux /proc; gone ones: 0)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _postgres_pids(port: int) -> list[int]:
    """The cluster's postmaster (``-p PORT`` on its command line) and its children."""
    master = None
    procs: dict[int, int] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        procs[int(d.name)] = ppid
        if cmd and cmd[0].endswith(b"postgres") and b"-p" in cmd and \
                str(port).encode() in cmd:
            master = int(d.name)
    return [] if master is None else [master] + [p for p, pp in procs.items() if pp == master]


def _procs(a: Any) -> None:
    """``--procs N``: N ``serve`` processes on one PostgreSQL database (each its own port),
    the senders routing whole traces by trace id; 1 vs N processes alternating for
    ``--rounds`` rounds, each on a fresh database of one throwaway cluster."""
    from pg import create_database, start_cluster

    import tracescore

    ctx = mp.get_context("spawn")
    admin, stop_pg = start_cluster()
    rows: list[dict[str, Any]] = []
    try:
        for k in range(a.rounds):
            for n in (1, a.procs):
                url, drop = create_database(admin)
                tracescore.init(db=url, metrics=["exact_match"]).shutdown()  # the schema
                q, stop = ctx.Queue(), ctx.Event()
                servers = [ctx.Process(target=_serve_proc, args=(url, q, stop))
                           for _ in range(n)]
                for p in servers:
                    p.start()
                ports = [q.get(timeout=120) for _ in servers]
                pg_port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
                pg0 = {p: _cpu_s([p]) for p in _postgres_pids(pg_port)}
                serve0 = _cpu_s([p.pid for p in servers if p.pid])
                r = _run(ports, a.senders * n, a.seconds, a.spans, None, seed=10 * k + n)
                # CPU seconds during the run: the serve processes, PostgreSQL (its backends
                # for this run's connections started during it: from 0)
                r["serve_cpu_s"] = _cpu_s([p.pid for p in servers if p.pid]) - serve0
                r["pg_cpu_s"] = sum(_cpu_s([p]) - pg0.get(p, 0.0)
                                    for p in _postgres_pids(pg_port))
                stop.set()
                stats = [q.get(timeout=120) for _ in servers]
                for p in servers:
                    p.join(60)
                drop()
                r.update(procs=n, round=k + 1, senders=a.senders * n,
                         records=sum(s["records"] for s in stats),
                         spans_stored=sum(s["spans_stored"] for s in stats),
                         load=os.getloadavg()[0])
                rows.append(r)
                print(f"round {k + 1}, {n} process(es): {r['spans_per_s']:,.0f} spans/s",
                      flush=True)
    finally:
        stop_pg()
    print("| serve processes | round | senders | acked spans/s | p50 ms | p99 ms | refused | "
          "records built | serve CPU µs/span | PostgreSQL CPU µs/span | load avg (1 min) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        per = 1e6 / max(1, r["spans_stored"])
        print(f"| {r['procs']} | {r['round']} | {r['senders']} | {r['spans_per_s']:,.0f} | "
              f"{r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {r['refused']} | {r['records']:,} | "
              f"{r['serve_cpu_s'] * per:.0f} | {r['pg_cpu_s'] * per:.0f} | "
              f"{r['load']:.2f} |")
    one = [r["spans_per_s"] for r in rows if r["procs"] == 1]
    many = [r["spans_per_s"] for r in rows if r["procs"] == a.procs]
    print(f"\nratio {a.procs} / 1 per round: {[round(m / o, 2) for o, m in zip(one, many)]}")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--senders", type=int, default=2)
    ap.add_argument("--spans", type=int, default=100, help="spans per request")
    ap.add_argument("--rate", type=float, default=5000.0, help="offered spans/s (rate run)")
    ap.add_argument("--pg", action="store_true", help="also on a throwaway PostgreSQL")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--phoenix", metavar="PYTHON", default=os.environ.get(
        "TRACESCORE_PHOENIX_PYTHON"),
                    help="a python with arize-phoenix (.ci/phoenix-venv.sh): also the same "
                         "max run against Phoenix's OTLP/HTTP endpoint, alternating with ours")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --phoenix or --procs: alternating rounds of the max run")
    ap.add_argument("--procs", type=int, default=0, choices=(0, 2, 4),
                    help="N serve processes on one PostgreSQL database vs one (max run, "
                         "--senders per process, --rounds alternating rounds)")
    a = ap.parse_args()
    if a.procs:
        _procs(a)
        return
    if a.phoenix:
        _side_by_side(a)
        return

    import tracescore
    from tracescore.intake import Serve, ServeConfig

    backends: list[tuple[str, Any]] = [("sqlite", None)]
    stop_pg = None
    if a.pg:
        from pg import start_cluster

        url, stop_pg = start_cluster()
        backends.append(("postgres", url))
    results = []
    drains: list[tuple[str, int, int, float, float]] = []
    try:
        for name, url in backends:
            with tempfile.TemporaryDirectory() as tmp:
                db = url or os.path.join(tmp, "serve.db")
                ts = tracescore.init(db=db, metrics=["exact_match"])  # cheap: skipped jobs
                serve = Serve(ts, otlp_http=("127.0.0.1", 0),
                              config=ServeConfig(grace_s=1.0)).start()
                assert serve.http_port is not None
                cpu_start, wall_start = time.process_time(), time.monotonic()
                for run, senders, rate in (("rate, idle", 1, a.rate), ("max", a.senders, None),
                                           ("rate, backlog", 1, a.rate)):
                    st = serve.stats()
                    # traces received but not yet assembled (10 spans each) when the run starts
                    backlog = st["spans_stored"] // 10 - st["traces_done"]
                    cpu0 = time.process_time()
                    r = _run(serve.http_port, senders, a.seconds, a.spans, rate,
                             seed=len(results) + 1)
                    cpu = time.process_time() - cpu0
                    st2 = serve.stats()
                    # the serve process's CPU (front end, spool, assembler, scoring; not the
                    # senders, not PostgreSQL) per span stored during the run
                    r["cpu_us_per_span"] = cpu / max(1, st2["spans_stored"]
                                                     - st["spans_stored"]) * 1e6
                    r.update(backend=name, run=run, offered=rate, senders=senders,
                             spans_stored=serve.stats()["spans_stored"],
                             records=serve.stats()["records"], backlog=backlog)
                    results.append(r)
                # until every received trace is assembled: the serve's CPU for all of it
                deadline = time.monotonic() + 300
                while time.monotonic() < deadline:
                    st = serve.stats()
                    if st["traces_done"] >= st["spans_stored"] // 10:
                        break
                    time.sleep(0.2)
                st = serve.stats()
                drains.append((name, st["spans_stored"], st["traces_done"],
                               (time.process_time() - cpu_start) / st["spans_stored"] * 1e6,
                               time.monotonic() - wall_start))
                serve.stop()
                ts.shutdown(timeout=30)
    finally:
        if stop_pg is not None:
            stop_pg()
    def offered(r: dict[str, Any]) -> str:
        return "as fast as acked" if r["offered"] is None else f"{r['offered']:,.0f}"

    print("| backend | run | senders | offered spans/s | acked spans/s | p50 ms | p99 ms | "
          "max ms | refused | traces waiting at start | records built (cumulative) | "
          "serve CPU µs/span |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['backend']} | {r['run']} | {r['senders']} | "
              f"{offered(r)} | "
              f"{r['spans_per_s']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
              f"{r['max_ms']:.1f} | {r['refused']} | {r['backlog']:,} | {r['records']:,} | "
              f"{r['cpu_us_per_span']:.0f} |")
    print("\n| backend | spans received (3 runs) | traces assembled | serve CPU µs per span "
          "(receive + store + assemble + record, all runs, backlog drained) | seconds |")
    print("|---|---:|---:|---:|---:|")
    for name, spans, done, us, secs in drains:
        print(f"| {name} | {spans:,} | {done:,} | {us:.0f} | {secs:.0f} |")
    print(f"\nload average at end (1/5/15 min): {list(os.getloadavg())}")
    if a.json:
        a.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
