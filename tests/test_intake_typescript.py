"""Another language, for real: the TypeScript example (examples/otlp-ts: @opentelemetry/
sdk-node and the OTLP/HTTP protobuf exporter, GenAI-convention spans for a RAG request) sends
its trace to ``serve``, which builds and scores its record. Skips only without node/npm."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers import capture_metrics
from intake_support import intake_records, scored, serving

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "otlp-ts"


@pytest.fixture(scope="module")
def built_app(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the TypeScript example")
    app = tmp_path_factory.mktemp("otlp-ts") / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("node_modules", "dist"))
    for cmd in (["npm", "install", "--no-audit", "--no-fund"], ["npm", "run", "build"]):
        out = subprocess.run(cmd, cwd=app, capture_output=True, text=True, timeout=600,
                             check=False)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return app


def test_typescript_app_is_scored_by_serve(tmp_path, built_app):
    db = str(tmp_path / "s.db")
    with serving(db, metrics=capture_metrics()) as serve:
        env = {**os.environ,
               "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT":
                   f"http://127.0.0.1:{serve.http_port}/v1/traces",
               "OTEL_RESOURCE_ATTRIBUTES": "service.name=ts-rag,service.version=1.2.0,"
                                           "deployment.environment.name=staging"}
        out = subprocess.run(["node", "dist/app.js", "What battery capacity does the Cargo "
                              "have?", "750 Wh"], cwd=built_app, env=env, capture_output=True,
                             text=True, timeout=120, check=False)
        assert out.returncode == 0, out.stderr[-3000:]
        run = json.loads(out.stdout.strip().splitlines()[-1])
        [rec] = intake_records(db, 1)
        assert rec["query"] == run["question"] and rec["answer"] == run["answer"]
        assert "750 Wh" in rec["answer"]
        assert [c["id"] for c in rec["contexts"]] == run["contexts"]
        assert run["contexts"][0] == "battery"
        assert rec["ground_truths"] == ["750 Wh"] and rec["model"] == "fake-model"
        assert (rec["release"], rec["environment"]) == ("1.2.0", "staging")
        assert rec["session_id"] == "conversation-1"
        assert rec["metadata"]["tracescore.intake.convention"] == "genai"
        s = scored(db, rec["record_id"], {"context_count", "answer_length"})
        assert s["context_count"]["value"] == 2.0
