"""``tracescore serve --config FILE`` and ``--forward grpc://HOST:PORT``: a real serve process
configured from a TOML file (the command line overriding it) forwards every span over OTLP/gRPC
to a real gRPC receiver on 127.0.0.1, the record's span with its scores, through a hop that is
down at first; bad files and bad gRPC addresses are usage errors (exit 2) naming what is wrong."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections import Counter
from pathlib import Path

from click.testing import CliRunner
from helpers import cli_script, rows, wait_for
from test_intake_protocol import ROOT, TRACE, genai_request, post

from tracescore import attributes as A
from tracescore._internal.otlp_receiver import GRPC
from tracescore.cli import main
from tracescore.testing import OtlpReceiver

TESTS = Path(__file__).parent


def _serve(config: Path, *extra: str) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get(
        "PYTHONPATH", "")])}
    env.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    proc = subprocess.Popen([*cli_script(), "serve", "--config", str(config), *extra],
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            env=env)
    assert proc.stderr is not None
    line = proc.stderr.readline()
    m = re.search(r"http 127\.0\.0\.1:(\d+)", line)
    assert m, line + (proc.stderr.read()[-2000:] if proc.poll() is not None else "")
    return proc, int(m.group(1))


def test_serve_from_a_config_file_forwards_over_grpc_with_the_scores_on_the_span(tmp_path):
    db = tmp_path / "s.db"
    with OtlpReceiver(GRPC, refuse_first=2) as hop:
        config = tmp_path / "serve.toml"
        config.write_text(
            "[serve]\n"
            f'db = "{db.as_posix()}"\n'
            'otlp-http = "127.0.0.1:0"\n'
            'metrics_module = "intake_apps.fleet_metrics"\n'
            "grace-seconds = 0.3\n"
            "hold-seconds = 30\n"
            "sample-rate = 0.0\n"  # the command line says 1.0: it wins
            f'forward = "grpc://127.0.0.1:{hop.port}"\n', encoding="utf-8")
        proc, port = _serve(config, "--sample-rate", "1")
        try:
            assert post(port, genai_request().SerializeToString())[0] == 200
            spans = hop.wait_for(lambda: (lambda s: s if len(s) >= 3 else None)(hop.spans()),
                                 timeout=120)
            assert hop.refused == 2  # down twice: the spans waited in the database, then went
            assert set(Counter((s.trace_id, s.span_id) for s in spans).values()) == {1}
            [root] = [s for s in spans if s.span_id == ROOT.hex()]
            assert root.trace_id == TRACE.hex()
            assert root.attributes[A.score_attribute("context_count")] == 1.0
            assert root.attributes[A.score_attribute("answer_length")] > 0
            wait_for(lambda: rows(str(db), "SELECT count(*) AS n FROM scores")[0]["n"] == 2, 60,
                     "the record scored (sample rate 1 from the command line)")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        assert proc.returncode == 0
        assert len(hop.spans()) == 3  # nothing sent again at the stop


def test_bad_config_files_and_grpc_addresses_are_usage_errors(tmp_path):
    runner = CliRunner()
    cases = {
        "unknown.toml": ('otlp_htp = "127.0.0.1:4318"\n', "unknown key 'otlp_htp'"),
        "type.toml": ('hold-seconds = "soon"\n', "'hold-seconds'"),
        "list.toml": ('judge = ["a", "b"]\n', "'judge' takes one value"),
        "broken.toml": ("hold-seconds = \n", "not valid TOML"),
    }
    for name, (text, says) in cases.items():
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        result = runner.invoke(main, ["serve", "--config", str(path)])
        assert result.exit_code == 2, (name, result.output)
        assert says in result.output, (name, result.output)
    for url in ("grpc://collector", "grpc://collector:4317/v1/traces", "grpcs://:4317"):
        result = runner.invoke(main, ["serve", "--db", str(tmp_path / "x.db"), "--otlp-http",
                                      "127.0.0.1:0", "--forward", url])
        assert result.exit_code == 2, (url, result.output)
        assert "grpc://HOST:PORT" in result.output, (url, result.output)
