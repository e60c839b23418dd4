"""Per-invoke cost of tracescore on the LangChain request path.

Three measurements, all in one process, variants interleaved (round-robin, shuffled order per
round) so that drift on a noisy 2-core machine hits every variant alike:

1. **End-to-end**: ``build_chain().invoke(question)`` of the offline example app (an LCEL
   ``{"context": retriever | format_docs, "question": RunnablePassthrough()} | prompt | llm |
   StrOutputParser()`` with a fake chat model, so the framework dominates) with no callbacks,
   a no-op ``BaseCallbackHandler``, an empty ``BaseTracer`` (the floor of tracer-based peers
   such as OpenInference) and tracescore at sample_rate 1.0 (with and without a span
   exporter) and 0.0. "Added" is paired per round: block median of the variant minus block
   median of "no callbacks" in the same round, then the median over rounds.
2. **Handler only (replay)**: the callback events of real invokes are recorded once and replayed
   straight into each handler on one thread, with fresh run ids. No LangChain, no thread pool:
   what the handler itself costs per invoke, with much less noise. Ablations split the tracescore
   cost into handler logic, OTel spans and ``submit``.
3. **Micro**: per-call cost of the pieces of the hot path (``submit`` and its parts, one OTel span).

Between blocks each tracescore variant is drained (``ts.flush()``, outside the timed window) so
its background work does not spill into another variant's window; the CPU the background threads
(writer, scorer, metric pool, span export) spend per record is reported separately, from the
threads' own CPU clocks. A guard counts SQLite and metric calls made from any thread that is not a
tracescore thread during the timed windows (must be 0).

``--app agent`` measures an agent-shaped LangGraph app instead of the LCEL chain: a LangChain
1.x ``create_agent`` graph whose fake tool-calling model calls a
``@tool(response_format="content_and_artifact")`` retrieval tool over the same BM25 retriever,
then answers (two model calls, one tool call, ~4 graph steps per request).

``--app compression`` measures the example chain over a ``ContextualCompressionRetriever``
(``LLMChainFilter`` with a fake model over the BM25 retriever: a model call per candidate).

Run:  python bench/hot_path.py [--app chain|agent|compression] [--quick] [--json out.json]
      [--profile]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import functools
import gc
import json
import os
import pstats
import random
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import (  # noqa: E402
    background_cpu,
    load_average,
    machine_info,
    md_table,
    median,
    pct,
    print_machine,
)
from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.messages import get_buffer_string  # noqa: E402
from langchain_core.tracers.base import BaseTracer  # noqa: E402
from opentelemetry import trace as trace_api  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

import tracescore  # noqa: E402

try:
    from tracescore.examples.langchain_rag import build_chain, load_questions
except ImportError:  # running from a checkout without the package installed
    from examples.langchain_rag import build_chain, load_questions  # type: ignore[no-redef]

DEFAULT_METRICS = ("rouge", "bleu", "token_f1", "exact_match", "rgb_accuracy", "rgb_rejection")
PROFILE_FILES = ("integrations/langchain.py", "integrations/langchain/", "integrations/_record.py",
                 "tracescore/client.py", "tracescore/sampling.py",
                 "tracescore/processor.py", "tracescore/queue.py", "tracescore/record.py",
                 "tracescore/_internal/text.py", "tracescore/_internal/errors.py")


# -- the agent-shaped app -------------------------------------------------------------------------
def build_agent_app() -> Any:
    """A create_agent graph with a content_and_artifact retrieval tool, called like the chain:
    ``app.invoke(question, config=...)``."""
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    try:
        from tracescore.examples.langchain_rag import KeywordRetriever
    except ImportError:
        from examples.langchain_rag import KeywordRetriever  # type: ignore[no-redef]

    retriever = KeywordRetriever()

    @tool(response_format="content_and_artifact")
    def search_handbook(query: str) -> tuple[str, list[Any]]:
        """Search the e-bike handbook."""
        docs = retriever.invoke(query)
        return "\n\n".join(d.page_content for d in docs), docs

    class ToolCallingModel(GenericFakeChatModel):
        messages: Any = iter(())
        disable_streaming: bool = True

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            # as provider models do: the tools' JSON declarations go into every call's
            # invocation_params (what tracescore reads as the tools offered)
            from langchain_core.utils.function_calling import convert_to_openai_tool

            return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            if messages[-1].type == "tool":
                reply = AIMessage(content=str(messages[-1].content)[:200])
            else:
                reply = AIMessage(content="", tool_calls=[{
                    "name": "search_handbook", "args": {"query": messages[-1].text},
                    "id": "call-1"}])
            return ChatResult(generations=[ChatGeneration(message=reply)])

    graph = create_agent(ToolCallingModel(), tools=[search_handbook])

    class AgentApp:
        def invoke(self, question: str, config: Any = None) -> Any:
            return graph.invoke({"messages": [("user", question)]}, config=config)

    return AgentApp()


def build_compression_app() -> Any:
    """The example chain over a ``ContextualCompressionRetriever``: the BM25 retriever's hits
    filtered by ``LLMChainFilter`` with a fake model (one model call per candidate, keeping
    the documents that name a number), then the answering model."""
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import LLMChainFilter
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.outputs import ChatGeneration, ChatResult

    try:
        from tracescore.examples.langchain_rag import KeywordRetriever
    except ImportError:
        from examples.langchain_rag import KeywordRetriever  # type: ignore[no-redef]

    class FilterModel(GenericFakeChatModel):
        messages: Any = iter(())

        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            context = messages[-1].text.split("> Context:")[-1]
            keep = any(ch.isdigit() for ch in context)
            return ChatResult(generations=[ChatGeneration(
                message=AIMessage(content="YES" if keep else "NO"))])

    retriever = ContextualCompressionRetriever(
        base_compressor=LLMChainFilter.from_llm(FilterModel()),
        base_retriever=KeywordRetriever())
    return build_chain(retriever)


# -- comparison handlers ------------------------------------------------------------------------
class NoopHandler(BaseCallbackHandler):
    """Implements nothing (LangChain falls back from on_chat_model_start to on_llm_start)."""


class EmptyTracer(BaseTracer):
    """A BaseTracer that persists nothing: the floor of tracer-based integrations."""

    def _persist_run(self, run: Any) -> None:
        pass


def lean_span_handler(ts: Any) -> Any | None:
    """What-if prototype (bench only, not shipped): the tracescore handler, except that inner
    CHAIN steps (RunnableSequence/Parallel/Passthrough, prompt, parser, lambdas) get no span of
    their own; their children attach to the nearest real span. Root, retriever, LLM and tool
    runs keep their spans. Built on the handler's internals, so it returns None (and the bench
    skips it) when those change."""
    try:
        from opentelemetry.trace import NonRecordingSpan
        from tracescore.integrations import langchain as L
        from tracescore.integrations.langchain.runs import _Run, _seq

        from tracescore import attributes as A

        class LeanSpans(L.TracescoreCallbackHandler):  # type: ignore[misc]
            def _start(self, run_id: Any, parent: Any, name: str, kind: str,
                       metadata: Any, tags: Any, attrs: dict[str, Any]) -> Any:
                # (``parent``: the live parent run, None for a root)
                if parent is not None and kind == A.KIND_CHAIN \
                        and hasattr(parent.span, "get_span_context"):
                    span = NonRecordingSpan(parent.span.get_span_context())
                    run = _Run(span, parent.root, False, name, next(_seq), parent,
                               tool_call=parent.tool_call, retriever=parent.retriever,
                               node_run=parent.node_run)
                    parent.root.open += 1
                    self._runs[run_id.int] = run
                    return run
                return super()._start(run_id, parent, name, kind, metadata, tags, attrs)

        return LeanSpans(ts)
    except Exception as exc:
        print(f"(what-if lean spans variant skipped: {exc!r})")
        return None


class NullSink(BaseCallbackHandler):
    """Implements on_chat_model_start as a no-op too (so no fallback): the floor of the replay
    loop itself."""

    def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
        return None


class Recorder(BaseCallbackHandler):
    """Records every callback (name, args, kwargs) of an invoke, for replay."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def __getattribute__(self, name: str) -> Any:
        if name.startswith("on_"):
            events = object.__getattribute__(self, "events")

            def record(*args: Any, **kwargs: Any) -> None:
                events.append((name, args, kwargs))

            return record
        return object.__getattribute__(self, name)


# -- the guard: SQLite / scoring never on an app thread -------------------------------------
class HotPathGuard:
    """Counts Store, sqlite3.connect and metric calls made during a timed window from a thread
    whose name does not start with ``tracescore`` (the app's threads: main and LangChain's
    executor threads)."""

    def __init__(self) -> None:
        self.active = False
        self.violations: collections.Counter[str] = collections.Counter()
        self.background_calls = 0
        self.wrapped = 0

    def _check(self, what: str) -> None:
        if self.active:
            name = threading.current_thread().name
            if name.startswith("tracescore"):
                self.background_calls += 1
            else:
                self.violations[f"{what} on thread {name}"] += 1

    def _wrap(self, fn: Callable[..., Any], what: str) -> Callable[..., Any]:
        check = self._check

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            check(what)
            return fn(*args, **kwargs)

        self.wrapped += 1
        return wrapper

    def install(self) -> None:
        import tracescore.store as store_mod

        for name, fn in list(vars(store_mod.Store).items()):
            if callable(fn) and not isinstance(fn, type) and (
                    not name.startswith("__") or name == "__init__"):
                setattr(store_mod.Store, name, self._wrap(fn, f"Store.{name}"))
        sqlite3.connect = self._wrap(sqlite3.connect, "sqlite3.connect")  # type: ignore[assignment]
        try:
            from tracescore.metrics import registry

            registry.available()  # loads the built-ins
            for factory in list(getattr(registry, "_REGISTRY", {}).values()):
                if isinstance(factory, type) and "__call__" in vars(factory):
                    factory.__call__ = self._wrap(factory.__call__, f"{factory.__name__}()")
        except Exception as exc:  # pragma: no cover - degrade, don't break the bench
            print(f"(guard: could not wrap metrics: {exc!r})")

    def window(self) -> _Window:
        return _Window(self)


class _Window:
    def __init__(self, guard: HotPathGuard) -> None:
        self.guard = guard

    def __enter__(self) -> None:
        self.guard.active = True

    def __exit__(self, *exc: Any) -> None:
        self.guard.active = False


# -- variants -----------------------------------------------------------------------------------
@dataclass
class Variant:
    key: str
    label: str
    handler: Any = None
    ts: Any = None
    exporter: InMemorySpanExporter | None = None
    captured: list[Any] | None = None
    samples: list[float] = field(default_factory=list)  # µs per invoke
    block_medians: list[float] = field(default_factory=list)
    block_cpu: list[float] = field(default_factory=list)  # µs of this thread's CPU per invoke
    #: µs of the whole process's CPU per invoke, from a block's start to the end of its drain
    #: (end-to-end): the app's threads and all background work of the block's requests
    block_proc_cpu: list[float] = field(default_factory=list)
    invokes: int = 0
    flush_failures: int = 0

    def config(self) -> dict[str, Any]:
        return {"callbacks": [self.handler]} if self.handler is not None else {}

    def drain(self) -> None:
        if self.ts is not None and not self.ts.flush(120):
            self.flush_failures += 1
        if self.exporter is not None:
            self.exporter.clear()
        if self.captured is not None:
            self.captured.clear()


def make_ts(tmp: str, name: str, metrics: Sequence[str], rate: float, exporter: bool
            ) -> tuple[Any, InMemorySpanExporter | None]:
    exp = InMemorySpanExporter() if exporter else None
    kwargs: dict[str, Any] = {"db": os.path.join(tmp, f"{name}.db"), "metrics": list(metrics),
                              "sample_rate": rate}
    if exp is not None:
        kwargs["span_exporter"] = exp
    return tracescore.init(**kwargs), exp


def ts_variant(tmp: str, key: str, label: str, metrics: Sequence[str], rate: float,
               exporter: bool) -> Variant:
    ts, exp = make_ts(tmp, key, metrics, rate, exporter)
    return Variant(key, label, handler=ts.langchain_handler(), ts=ts, exporter=exp)


# -- 1. end-to-end ------------------------------------------------------------------------------
def run_e2e(variants: list[Variant], chain: Any, questions: list[str], rounds: int,
            per_round: int, warmup: int, guard: HotPathGuard, rng: random.Random) -> None:
    n = len(questions)
    for v in variants:
        for i in range(warmup):
            chain.invoke(questions[i % n], config=v.config())
            v.invokes += 1
        v.drain()
    perf = time.perf_counter_ns
    for r in range(rounds):
        order = variants[:]
        rng.shuffle(order)
        for v in order:
            gc.collect()
            block: list[float] = []
            base = r * per_round
            p0 = time.process_time_ns()
            with guard.window():
                for i in range(per_round):
                    q = questions[(base + i) % n]
                    cfg = v.config()
                    t0 = perf()
                    chain.invoke(q, config=cfg)
                    block.append((perf() - t0) / 1000)
            v.invokes += per_round
            v.samples.extend(block)
            v.block_medians.append(median(block))
            v.drain()
            v.block_proc_cpu.append((time.process_time_ns() - p0) / 1000 / per_round)


def e2e_rows(variants: list[Variant]) -> tuple[list[list[Any]], dict[str, dict[str, float]]]:
    base = variants[0]
    out: dict[str, dict[str, float]] = {}
    for v in variants:
        paired = [a - b for a, b in zip(v.block_medians, base.block_medians)]
        out[v.key] = {
            "median_us": median(v.samples),
            "added_us": median(paired) if v is not base else 0.0,
            "added_p25_us": pct(paired, 25) if v is not base else 0.0,
            "added_p75_us": pct(paired, 75) if v is not base else 0.0,
            "p99_us": pct(v.samples, 99),
            "max_us": max(v.samples) if v.samples else float("nan"),
            "invokes": v.invokes,
            "added_process_cpu_us": median(
                [a - b for a, b in zip(v.block_proc_cpu, base.block_proc_cpu)])
            if v is not base else 0.0,
        }
    rows = []
    for v in variants:
        o = out[v.key]
        iqr = "" if v is base else f"{o['added_p25_us']:.0f} … {o['added_p75_us']:.0f}"
        rows.append([v.label, o["median_us"], o["added_us"], iqr, o["p99_us"], o["max_us"]])
    return rows, out


# -- 2. handler-only replay ---------------------------------------------------------------------
Event = tuple[str, tuple[Any, ...], dict[str, Any]]


def record_events(chain: Any, questions: list[str]) -> list[list[Event]]:
    recs = []
    for q in questions:
        rec = Recorder()
        chain.invoke(q, config={"callbacks": [rec]})
        recs.append(rec.events)
    return recs


def run_ids(events: list[Event]) -> list[Any]:
    seen: dict[Any, None] = {}
    for _, _, kw in events:
        seen.setdefault(kw["run_id"], None)
    return list(seen)


def fresh_maps(recs: list[list[Event]], ids: list[list[Any]], start: int, count: int
               ) -> list[dict[Any, uuid.UUID]]:
    return [{old: uuid.uuid4() for old in ids[(start + i) % len(recs)]} for i in range(count)]


def replay(handler: Any, events: list[Event], idmap: dict[Any, uuid.UUID]) -> None:
    """Deliver one invoke's callbacks, as LangChain's CallbackManager.handle_event would."""
    for name, args, kwargs in events:
        kw = dict(kwargs)
        kw["run_id"] = idmap[kw["run_id"]]
        parent = kw.get("parent_run_id")
        if parent is not None:
            kw["parent_run_id"] = idmap[parent]
        try:
            getattr(handler, name)(*args, **kw)
        except NotImplementedError:
            if name != "on_chat_model_start":
                raise
            # LangChain's fallback for handlers without on_chat_model_start.
            handler.on_llm_start(args[0], [get_buffer_string(m) for m in args[1]], **kw)


def run_replay(variants: list[Variant], recs: list[list[Event]], rounds: int, per_round: int,
               guard: HotPathGuard, rng: random.Random) -> None:
    ids = [run_ids(e) for e in recs]
    for v in variants:  # warm-up
        for i, m in enumerate(fresh_maps(recs, ids, 0, 20)):
            replay(v.handler, recs[i % len(recs)], m)
        v.invokes += 20
        v.drain()
    perf = time.perf_counter_ns
    n = len(recs)
    for r in range(rounds):
        order = variants[:]
        rng.shuffle(order)
        for v in order:
            start = r * per_round
            maps = fresh_maps(recs, ids, start, per_round)
            gc.collect()
            block = []
            h = v.handler
            c0 = time.thread_time_ns()
            with guard.window():
                for i in range(per_round):
                    ev = recs[(start + i) % n]
                    t0 = perf()
                    replay(h, ev, maps[i])
                    block.append((perf() - t0) / 1000)
            v.block_cpu.append((time.thread_time_ns() - c0) / 1000 / per_round)
            v.invokes += per_round
            v.samples.extend(block)
            v.block_medians.append(median(block))
            v.drain()


# -- 3. micro-benchmarks --------------------------------------------------------------------------
def timeit_us(fn: Callable[[int], Any], batches: int, batch: int) -> tuple[float, float]:
    """(wall, CPU of this thread): medians over ``batches`` of the mean µs per call of
    ``fn(i)`` in a batch of ``batch``. The thread's CPU time leaves out time spent waiting for
    the GIL while a background thread runs."""
    perf, cpu = time.perf_counter_ns, time.thread_time_ns
    wall_res, cpu_res = [], []
    k = 0
    for _ in range(batches):
        c0 = cpu()
        t0 = perf()
        for _ in range(batch):
            fn(k)
            k += 1
        wall_res.append((perf() - t0) / 1000 / batch)
        cpu_res.append((cpu() - c0) / 1000 / batch)
    return median(wall_res), median(cpu_res)


def run_micro(ts: Any, ts_noexp: Any, records: list[Any], batches: int, batch: int
              ) -> list[tuple[str, float, float, str]]:
    from tracescore._internal.ids import new_span_id, new_trace_id

    total = batches * batch + 10
    base = [records[i % len(records)] for i in range(total)]
    fresh = [r.replace(trace_id=new_trace_id(), span_id=new_span_id()) for r in base]
    names = tuple(getattr(ts, "_metric_names", ()))
    rows: list[tuple[str, float, float, str]] = []

    def add(label: str, fn: Callable[[int], Any], note: str = "") -> None:
        try:
            gc.collect()
            rows.append((label, *timeit_us(fn, batches, batch), note))
        except Exception as exc:
            rows.append((label, float("nan"), float("nan"), f"failed: {exc!r}"[:120]))

    from tracescore.sampling import trace_fraction

    add("empty loop (timer floor)", lambda i: None)
    add("sampling.trace_fraction (SHA-256)", lambda i: trace_fraction(fresh[i].trace_id))
    add("Sampler.decide", lambda i: ts.sampler.decide(fresh[i], names))
    decisions = [ts.sampler.decide(r, names) for r in fresh]
    add("Tracescore.prepare (no redaction)", lambda i: ts.prepare(fresh[i]))
    add("Tracescore._plan_jobs (writer thread; also called by submit at 1.0)",
        lambda i: ts._plan_jobs(fresh[i], decisions[i]),
        f"{len(names)} metrics; submit calls it to count the span hold's jobs")
    if ts.attacher is not None:
        add("ScoreAttachingProcessor.expect",
            lambda i: ts.attacher.expect(int(fresh[i].trace_id, 16),
                                         int(fresh[i].span_id, 16) ^ 0x5A5A, 1))
    fresh2 = [r.replace(trace_id=new_trace_id(), span_id=new_span_id()) for r in base]
    add("RecordQueue.put", lambda i: ts.queue.put((fresh2[i], decisions[i])))
    ts.flush(120)
    fresh3 = [r.replace(trace_id=new_trace_id(), span_id=new_span_id()) for r in base]
    add("Tracescore.submit, sample_rate=1.0 (decide + plan + expect + put)",
        lambda i: ts.submit(fresh3[i]))
    ts.flush(120)
    attrs = {"openinference.span.kind": "CHAIN", "input.value": "How long does a test ride last?"}
    add("OTel span start+end, tracescore provider with exporter",
        lambda i: ts.tracer.start_span("RunnableSequence", attributes=attrs).end())
    add("OTel span start+end, tracescore provider without exporter",
        lambda i: ts_noexp.tracer.start_span("RunnableSequence", attributes=attrs).end())
    noop_tracer = trace_api.NoOpTracer()
    add("OTel NoOpTracer span start+end",
        lambda i: noop_tracer.start_span("RunnableSequence", attributes=attrs).end())
    ts.flush(120)
    return rows


# -- profile ----------------------------------------------------------------------------------------
def run_profile(handler: Any, ts: Any, exporter: InMemorySpanExporter | None,
                recs: list[list[Event]], n: int, top: int) -> dict[str, Any]:
    ids = [run_ids(e) for e in recs]
    maps = fresh_maps(recs, ids, 0, n)
    gc.collect()
    prof = cProfile.Profile()
    prof.enable()
    for i in range(n):
        replay(handler, recs[i % len(recs)], maps[i])
    prof.disable()
    ts.flush(120)
    if exporter is not None:
        exporter.clear()
    st = pstats.Stats(prof)
    total = st.total_tt  # type: ignore[attr-defined]
    entries = []
    for (file, line, func), (_cc, nc, tt, ct, _callers) in st.stats.items():  # type: ignore[attr-defined]
        f = file.replace("\\", "/")
        short = f
        root = str(Path(__file__).resolve().parents[1]).replace("\\", "/") + "/"
        for marker in ("site-packages/", root):
            if marker in f:
                short = f.split(marker, 1)[1]
        entries.append({"where": f"{short}:{line}({func})", "file": short, "calls": nc,
                        "tottime": tt, "cumtime": ct})

    def per_invoke(x: float) -> float:
        return x / n * 1e6

    ours = [e for e in entries if any(e["file"].endswith(p) for p in PROFILE_FILES)]
    otel = [e for e in entries if e["file"].startswith("opentelemetry/")]
    by_file: dict[str, float] = collections.defaultdict(float)
    for e in entries:
        key = e["file"]
        if key.startswith("opentelemetry/"):
            key = "opentelemetry (all files)"
        elif key.startswith("/") or key.startswith("<") or key.startswith("~"):
            key = "stdlib / builtins"
        by_file[key] += e["tottime"]
    return {
        "invokes": n,
        "total_us_per_invoke": per_invoke(total),
        "by_file": sorted(((k, per_invoke(v), 100 * v / total) for k, v in by_file.items()),
                          key=lambda x: -x[1])[:top],
        "ours_cumulative": [(e["where"], e["calls"] / n, per_invoke(e["cumtime"]),
                             100 * e["cumtime"] / total)
                            for e in sorted(ours, key=lambda e: -e["cumtime"])[:top]],
        "ours_self": [(e["where"], e["calls"] / n, per_invoke(e["tottime"]),
                       100 * e["tottime"] / total)
                      for e in sorted(ours, key=lambda e: -e["tottime"])[:top]],
        "otel_self": [(e["where"], e["calls"] / n, per_invoke(e["tottime"]),
                       100 * e["tottime"] / total)
                      for e in sorted(otel, key=lambda e: -e["tottime"])[:top]],
    }


# -- main -------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="few rounds: a smoke test")
    ap.add_argument("--rounds", type=int, help="end-to-end rounds (default 30, quick 3)")
    ap.add_argument("--per-round", type=int, help="invokes per variant per round (default 50)")
    ap.add_argument("--replay-rounds", type=int, help="handler-only rounds (default 40)")
    ap.add_argument("--metrics", default=",".join(DEFAULT_METRICS),
                    help="comma-separated tracescore metrics (default: the local defaults)")
    ap.add_argument("--profile", action="store_true",
                    help="always profile the tracescore handler (default: only on a miss)")
    ap.add_argument("--no-profile", action="store_true", help="never profile")
    ap.add_argument("--json", metavar="PATH", help="write all results as JSON")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--app", choices=("chain", "agent", "compression"), default="chain",
                    help="the LCEL example chain (default), an agent-shaped LangGraph app, or "
                         "the chain over a ContextualCompressionRetriever (LLMChainFilter)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 30)
    per_round = args.per_round or (10 if args.quick else 50)
    replay_rounds = args.replay_rounds or (3 if args.quick else 40)
    replay_per_round = 10 if args.quick else 50
    warmup = 5 if args.quick else 30
    metrics = [m for m in args.metrics.split(",") if m]
    rng = random.Random(args.seed)

    info = machine_info()
    print("# tracescore hot path benchmark\n")
    print_machine(info)
    print(f"metrics: {', '.join(metrics)}; end-to-end {rounds} rounds × {per_round} invokes per "
          f"variant (+{warmup} warm-up); replay {replay_rounds} rounds × {replay_per_round}\n")

    guard = HotPathGuard()
    guard.install()
    tmp = tempfile.mkdtemp(prefix="tracescore-bench-")
    chain = {"chain": build_chain, "agent": build_agent_app,
             "compression": build_compression_app}[args.app]()
    print(f"app: {args.app}; tracescore from {Path(tracescore.__file__).parent}\n")
    questions = [q["question"] for q in load_questions()]

    variants = [
        Variant("none", "no callbacks"),
        Variant("noop", "no-op BaseCallbackHandler", handler=NoopHandler()),
        Variant("tracer", "empty BaseTracer", handler=EmptyTracer()),
        ts_variant(tmp, "ts1", "tracescore 1.0, exporter", metrics, 1.0, True),
        ts_variant(tmp, "ts1_noexp", "tracescore 1.0, no exporter", metrics, 1.0, False),
        ts_variant(tmp, "ts0", "tracescore 0.0, exporter", metrics, 0.0, True),
    ]
    lean = ts_variant(tmp, "whatif", "what-if: tracescore 1.0, exporter, no spans for inner "
                      "chain steps", metrics, 1.0, True)
    lean.handler = lean_span_handler(lean.ts)
    if lean.handler is not None:
        variants.append(lean)
    else:
        lean.ts.shutdown(10)
    by_key = {v.key: v for v in variants}
    results: dict[str, Any] = {"machine": info, "metrics": metrics,
                               "config": {"rounds": rounds, "per_round": per_round,
                                          "replay_rounds": replay_rounds,
                                          "replay_per_round": replay_per_round}}

    # 1. end-to-end
    t0 = time.perf_counter()
    run_e2e(variants, chain, questions, rounds, per_round, warmup, guard, rng)
    e2e_s = time.perf_counter() - t0
    rows, e2e = e2e_rows(variants)
    results["e2e"] = e2e
    print(f"## 1. End-to-end: µs per `chain.invoke` ({e2e_s:.0f} s)\n")
    print(md_table(["variant", "median µs", "added µs (paired)", "added IQR", "p99 µs",
                    "max µs"], rows))
    a = {k: e2e[k]["added_us"] for k in e2e}
    ratios = {
        "ts1/noop": a["ts1"] / a["noop"] if a["noop"] > 0 else float("nan"),
        "ts1/tracer": a["ts1"] / a["tracer"] if a["tracer"] > 0 else float("nan"),
        "ts1_noexp/noop": a["ts1_noexp"] / a["noop"] if a["noop"] > 0 else float("nan"),
        "ts0/noop": a["ts0"] / a["noop"] if a["noop"] > 0 else float("nan"),
        "ts0/tracer": a["ts0"] / a["tracer"] if a["tracer"] > 0 else float("nan"),
    }
    if "whatif" in a:
        ratios["what-if/tracer"] = a["whatif"] / a["tracer"] if a["tracer"] > 0 else float("nan")
        ratios["what-if/noop"] = a["whatif"] / a["noop"] if a["noop"] > 0 else float("nan")
    results["e2e_ratios"] = ratios
    print()
    print(md_table(["ratio of added µs", "value"], [[k, v] for k, v in ratios.items()]))

    # background work and integrity per tracescore variant
    bg_rows = []
    integrity = {}
    for v in variants:
        if v.ts is None:
            continue
        cpu = background_cpu(v.ts)
        st = v.ts.stats()
        written = v.ts.queue.written
        rec_count = _db_count(v.ts.db_path, "records")
        integrity[v.key] = {"invokes": v.invokes, "written": written, "db_records": rec_count,
                            "dropped": v.ts.queue.dropped, "flush_failures": v.flush_failures,
                            "scored_jobs": st.get("scored_jobs"), "open_jobs": st.get("open_jobs"),
                            "background_cpu_s": cpu}
        per_rec = {k: s / max(1, written) * 1e6 for k, s in cpu.items()}
        bg_rows.append([v.label, v.invokes, written, rec_count, v.ts.queue.dropped,
                        st.get("scored_jobs"), v.flush_failures,
                        sum(per_rec.values()),
                        ", ".join(f"{k} {x:.0f}" for k, x in per_rec.items() if x >= 0.5)])
    results["e2e_integrity"] = integrity
    print("\nIntegrity and background cost (end-to-end phase; background CPU from the threads' "
          "own CPU clocks, µs per record written):\n")
    print(md_table(["variant", "invokes", "written", "rows in db", "dropped", "jobs scored",
                    "flush timeouts", "bg CPU µs/record", "by thread (µs/record)"], bg_rows))
    print(f"\nguard: {sum(guard.violations.values())} SQLite/metric calls on app threads during "
          f"timed windows ({guard.background_calls} on tracescore threads; "
          f"{guard.wrapped} functions wrapped)")
    for what, n in guard.violations.most_common(10):
        print(f"  VIOLATION {n}× {what}")
    results["guard"] = {"violations": dict(guard.violations),
                        "background_calls": guard.background_calls}

    # 2. handler-only replay
    recs = record_events(chain, questions)
    cap_ts, cap_exp = make_ts(tmp, "ts1_nosubmit", metrics, 1.0, True)
    captured: list[Any] = []
    cap_ts.submit = lambda record, **kw: captured.append(record)  # capture, do not submit
    lean_ts, _ = make_ts(tmp, "ts_nootel", metrics, 1.0, False)
    lean_ts.submit = lambda record, **kw: None
    lean_handler = lean_ts.langchain_handler()
    lean_handler.tracer = trace_api.NoOpTracer()
    rvars = [
        Variant("null", "replay loop only"),
        Variant("noop", "no-op BaseCallbackHandler", handler=NoopHandler()),
        Variant("tracer", "empty BaseTracer", handler=EmptyTracer()),
        Variant("ts1", "tracescore 1.0, exporter", handler=by_key["ts1"].handler,
                ts=by_key["ts1"].ts, exporter=by_key["ts1"].exporter),
        Variant("ts1_noexp", "tracescore 1.0, no exporter", handler=by_key["ts1_noexp"].handler,
                ts=by_key["ts1_noexp"].ts),
        Variant("ts0", "tracescore 0.0, exporter", handler=by_key["ts0"].handler,
                ts=by_key["ts0"].ts, exporter=by_key["ts0"].exporter),
        Variant("ts_nosubmit", "ablation: tracescore spans, submit stubbed",
                handler=cap_ts.langchain_handler(), ts=cap_ts, exporter=cap_exp,
                captured=captured),
        Variant("ts_lean", "ablation: handler logic only (NoOpTracer, submit stubbed)",
                handler=lean_handler, ts=lean_ts),
    ]
    if "whatif" in by_key:
        w = by_key["whatif"]
        rvars.append(Variant("whatif", w.label, handler=w.handler, ts=w.ts, exporter=w.exporter))
    rvars[0].handler = NullSink()
    for v in rvars:
        v.samples, v.block_medians, v.invokes = [], [], 0
    t0 = time.perf_counter()
    run_replay(rvars, recs, replay_rounds, replay_per_round, guard, rng)
    rep_s = time.perf_counter() - t0
    base = rvars[0]
    rep: dict[str, dict[str, float]] = {}
    rrows = []
    for v in rvars:
        paired = [x - y for x, y in zip(v.block_medians, base.block_medians)]
        paired_cpu = [x - y for x, y in zip(v.block_cpu, base.block_cpu)]
        rep[v.key] = {"median_us": median(v.samples), "added_us": median(paired),
                      "added_cpu_us": median(paired_cpu),
                      "p99_us": pct(v.samples, 99), "max_us": max(v.samples)}
        rrows.append([v.label, rep[v.key]["median_us"], rep[v.key]["added_us"],
                      rep[v.key]["added_cpu_us"], rep[v.key]["p99_us"], rep[v.key]["max_us"]])
    results["replay"] = rep
    ra = {k: rep[k]["added_us"] for k in rep}
    rratios = {
        "ts1/noop": ra["ts1"] / ra["noop"] if ra["noop"] > 0 else float("nan"),
        "ts1/tracer": ra["ts1"] / ra["tracer"] if ra["tracer"] > 0 else float("nan"),
        "ts0/tracer": ra["ts0"] / ra["tracer"] if ra["tracer"] > 0 else float("nan"),
    }
    if "whatif" in ra:
        rratios["what-if/tracer"] = ra["whatif"] / ra["tracer"] if ra["tracer"] > 0 else float("nan")
    results["replay_ratios"] = rratios
    n_events = sum(len(e) for e in recs) / len(recs)
    print(f"\n## 2. Handler only: µs per invoke's callbacks, replayed on one thread "
          f"({n_events:.0f} callbacks/invoke, {rep_s:.0f} s)\n")
    print(md_table(["handler", "median µs", "added µs (wall)", "added µs (thread CPU)",
                    "p99 µs", "max µs"], rrows))
    print()
    print(md_table(["ratio of added µs (replay)", "value"], [[k, v] for k, v in rratios.items()]))
    split = {
        "handler logic (run map, extraction, record build)": ra["ts_lean"],
        "OTel spans via the SDK + exporter processor": ra["ts_nosubmit"] - ra["ts_lean"],
        "prepare + submit (sampling, hold, enqueue)": ra["ts1"] - ra["ts_nosubmit"],
    }
    results["replay_split"] = split
    print("\nWhere tracescore's replay cost goes (from the ablations):\n")
    print(md_table(["part", "µs per invoke", "share"],
                   [[k, x, f"{100 * x / ra['ts1']:.0f}%" if ra["ts1"] > 0 else ""]
                    for k, x in split.items()]))

    # 3. micro
    records = list(captured) or []
    if not records:
        for i, m in enumerate(fresh_maps(recs, [run_ids(e) for e in recs], 0, len(recs))):
            replay(rvars[6].handler, recs[i], m)
        records = list(captured)
    micro = run_micro(by_key["ts1"].ts, by_key["ts1_noexp"].ts, records,
                      batches=5 if args.quick else 30, batch=50 if args.quick else 200)
    results["micro"] = [{"what": w, "wall_us": us, "cpu_us": c, "note": note}
                        for w, us, c, note in micro]
    print("\n## 3. Micro: µs per call of the hot-path pieces (wall, and CPU of the calling "
          "thread: the difference is time spent waiting for the GIL while background threads "
          "write and score)\n")
    print(md_table(["call", "wall µs", "CPU µs", "note"], micro))

    # verdict
    target_ok = a["ts1"] < 0.95 * a["tracer"]
    tie = not target_ok and a["ts1"] <= 1.05 * a["tracer"]
    ideal_ok = a["noop"] > 0 and a["ts1"] <= 1.5 * a["noop"]
    no_wait = (not guard.violations and all(i["dropped"] == 0 for i in integrity.values())
               and all(i["written"] == i["invokes"] == i["db_records"]
                       and i["flush_failures"] == 0 for i in integrity.values()))
    results["verdict"] = {"beats_empty_tracer": target_ok, "tie_with_empty_tracer": tie,
                          "within_1_5x_noop": ideal_ok,
                          "app_thread_never_waits": no_wait}
    print("\n## Verdict\n")
    print(f"- tracescore@1.0 adds {a['ts1']:.0f} µs end-to-end vs {a['tracer']:.0f} µs for the "
          f"empty BaseTracer ({ratios['ts1/tracer']:.2f}×) and {a['noop']:.0f} µs for the no-op "
          f"handler ({ratios['ts1/noop']:.2f}×); handler-only replay: {ra['ts1']:.0f} vs "
          f"{ra['tracer']:.0f} vs {ra['noop']:.0f} µs ({rratios['ts1/tracer']:.2f}× tracer, "
          f"{rratios['ts1/noop']:.2f}× no-op).")
    # Total CPU per request, background included: the app thread's added CPU (replay) plus the
    # CPU the background threads spent per record written (end-to-end phase), against the
    # empty BaseTracer's added CPU (it has no background work).
    bg1 = integrity["ts1"]["background_cpu_s"]
    bg_us = sum(bg1.values()) / max(1, integrity["ts1"]["written"]) * 1e6
    total_us = rep["ts1"]["added_cpu_us"] + bg_us
    tracer_cpu = rep["tracer"]["added_cpu_us"]
    results["total_cpu"] = {"request_path_us": rep["ts1"]["added_cpu_us"],
                            "background_us_per_record": bg_us, "total_us": total_us,
                            "empty_tracer_us": tracer_cpu,
                            "ratio": total_us / tracer_cpu if tracer_cpu > 0 else float("nan")}
    print(f"- total CPU per request at 1.0 (app thread {rep['ts1']['added_cpu_us']:.0f} µs + "
          f"background {bg_us:.0f} µs per record) = {total_us:.0f} µs vs {tracer_cpu:.0f} µs "
          f"for the empty BaseTracer: {results['total_cpu']['ratio']:.2f}×.")
    # The same, measured whole: the process's CPU from a block's start to the end of its drain
    # (every thread: the app's, LangChain's pool, tracescore's background work for the block's
    # requests), paired against "no callbacks" in the same round.
    pc = {k: e2e[k]["added_process_cpu_us"] for k in ("tracer", "ts1", "ts0")}
    results["total_cpu"]["e2e_process"] = {
        **pc, "ratio": pc["ts1"] / pc["tracer"] if pc["tracer"] > 0 else float("nan")}
    print(f"- whole process CPU per request, end-to-end (block + drain, paired with no "
          f"callbacks): tracescore 1.0 {pc['ts1']:.0f} µs, 0.0 {pc['ts0']:.0f} µs, empty "
          f"BaseTracer {pc['tracer']:.0f} µs: "
          f"{results['total_cpu']['e2e_process']['ratio']:.2f}×.")
    verdict = "MET" if target_ok else ("TIE (within ±5%)" if tie else "MISSED")
    print(f"- target 'adds less than the empty BaseTracer': {verdict}; "
          f"'within 1.5× of the no-op handler': {'MET' if ideal_ok else 'MISSED'}.")
    print(f"- app thread never waits on SQLite or scoring: {'YES' if no_wait else 'NO'} "
          f"(guard violations {sum(guard.violations.values())}, drops "
          f"{sum(i['dropped'] for i in integrity.values())}, every invoke written: "
          f"{all(i['written'] == i['invokes'] == i['db_records'] for i in integrity.values())})")

    if not args.no_profile and (args.profile or not (target_ok and ideal_ok)):
        n = 30 if args.quick else 400
        prof = run_profile(by_key["ts1"].handler, by_key["ts1"].ts, by_key["ts1"].exporter,
                           recs, n, top=15)
        results["profile"] = prof
        print(f"\n## Profile: tracescore 1.0 handler, {n} replayed invokes under cProfile "
              f"({prof['total_us_per_invoke']:.0f} µs/invoke profiled; cProfile inflates "
              "absolute numbers, read the shares)\n")
        print(md_table(["file (self time)", "µs/invoke", "% of total"], prof["by_file"]))
        print()
        print(md_table(["tracescore function (cumulative)", "calls/invoke", "µs/invoke",
                        "% of total"], prof["ours_cumulative"]))
        print()
        print(md_table(["tracescore function (self)", "calls/invoke", "µs/invoke", "% of total"],
                       prof["ours_self"]))
        print()
        print(md_table(["opentelemetry function (self)", "calls/invoke", "µs/invoke",
                        "% of total"], prof["otel_self"][:10]))

    for v in variants:
        if v.ts is not None:
            v.ts.shutdown(60)
    cap_ts.shutdown(60)
    lean_ts.shutdown(60)
    results["loadavg_at_end"] = load_average()
    print(f"\nload average at end (1/5/15 min): {results['loadavg_at_end']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
        print(f"\nwrote {args.json}")
    return 0


def _db_count(path: str, table: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
