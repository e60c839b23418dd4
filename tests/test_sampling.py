from __future__ import annotations

import pytest

from tracescore.record import RagRecord
from tracescore.sampling import Sampler, TokenBucket, trace_fraction


def rec(i: int, **kw: object) -> RagRecord:
    return RagRecord(trace_id=f"{i:032x}", span_id=f"{i:016x}", **kw)  # type: ignore[arg-type]


def test_fraction_is_sha256_and_uniform():
    import hashlib

    tid = "0af7651916cd43dd8448eb211c80319c"
    expected = int.from_bytes(hashlib.sha256(tid.encode()).digest()[:8], "big") / 2**64
    assert trace_fraction(tid) == expected
    us = [trace_fraction(f"{i:032x}") for i in range(20_000)]
    assert all(0 <= u < 1 for u in us)
    for lo in (0.0, 0.25, 0.5, 0.75):  # roughly uniform quartiles
        share = sum(lo <= u < lo + 0.25 for u in us) / len(us)
        assert 0.23 < share < 0.27


def test_nested_rates_and_determinism():
    s = Sampler(0.2, {"judge": 0.05})
    decisions = [s.decide(rec(i), ["cheap", "judge"]) for i in range(5000)]
    cheap = {i for i, d in enumerate(decisions) if "cheap" in d.metrics}
    judge = {i for i, d in enumerate(decisions) if "judge" in d.metrics}
    assert judge <= cheap  # the 5 % set is a subset of the 20 % set
    assert 0.17 < len(cheap) / 5000 < 0.23 and 0.03 < len(judge) / 5000 < 0.07
    again = Sampler(0.2, {"judge": 0.05})  # another process decides the same
    assert [again.decide(rec(i), ["cheap", "judge"]) for i in range(5000)] == decisions


def test_force_rules():
    s = Sampler(0.0)
    assert not s.decide(rec(1), ["m"]).sampled
    d = s.decide(rec(1, error="ValueError: x"), ["m"])
    assert d.metrics == ("m",) and d.forced == "error"
    d = s.decide(rec(1, metadata={"tracescore.force_sample": True}), ["m"])
    assert d.forced == "metadata flag"


@pytest.mark.parametrize("bad", [-0.1, 1.5, "0.5", None, True])
def test_bad_rates_rejected(bad):
    with pytest.raises(ValueError, match="sample rate"):
        Sampler(bad)  # type: ignore[arg-type]


def test_token_bucket_caps_bursts():
    b = TokenBucket(per_minute=60, burst=3)
    assert [b.try_acquire() for _ in range(5)] == [True, True, True, False, False]
    assert 0 < b.wait_time() <= 1.0
