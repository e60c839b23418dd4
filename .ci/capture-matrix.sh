#!/usr/bin/env bash
# The capture tests against the lowest supported framework versions (.ci/lowest.txt), in a
# venv of their own: a release that breaks a capture assumption shows up in the main run (the
# newest versions), one that the code came to depend on shows up here. A few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.ci-lowest-venv}"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q -e '.[langchain,llama-index,postgres]' 'pytest>=8' \
    'pytest-xdist>=3.5' -r .ci/lowest.txt
"$venv/bin/python" -m pip check >/dev/null || "$venv/bin/python" -m pip check
"$venv/bin/python" - <<'PY'
import importlib.metadata as md

pins = {}
for line in open(".ci/lowest.txt"):
    line = line.split("#")[0].strip()
    if line:
        name, version = line.split("==")
        pins[name] = version
got = {name: md.version(name) for name in pins}
assert got == pins, f"lowest versions not installed: {got} != {pins}"
print("capture matrix (lowest):", ", ".join(f"{k} {v}" for k, v in got.items()))
PY
# Two span-tree details of streamed LlamaIndex answers differ before llama-index-core 0.14.25
# (the streamed LLM call's span nests under the synthesizer's, one more span is open while
# the stream is read); the records are the same. Those two checks hold on the newest only.
"$venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile \
    tests/test_capture_*.py tests/test_langchain_capture.py tests/test_llama_index_capture.py \
    tests/test_example_app.py \
    tests/test_agent_checks.py tests/test_agent_store.py tests/test_agent_llama.py \
    tests/test_agent_trajectory.py tests/test_session_keys.py tests/test_request_path_deferred.py \
    --deselect tests/test_llama_index_capture.py::test_streaming_query_is_recorded_once_consumed \
    --deselect tests/test_llama_index_capture.py::test_open_runs_are_bounded
