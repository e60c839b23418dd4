"""Monitor declarations (tracescore.monitor.config): the TOML file and init(monitors=...),
validated on load with errors that name the file, the monitor and the key."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest

from tracescore._internal.secrets import scrub
from tracescore.metrics import registry
from tracescore.monitor.config import (
    DEFAULT_FILE,
    PIPELINE_FIGURES,
    Channel,
    Monitor,
    MonitorConfigError,
    MonitorSet,
    duration,
    load_monitors,
    monitors_from_objects,
)

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / DEFAULT_FILE
SLACK_URL = "https://hooks.slack.com/services/T000/B000/secretsecret"

FULL = """
[defaults]
window = "2h"
min_n = 40
alpha = 0.01
notify = ["slack"]
no_data = "ok"
rule = "anytime"
renotify = "12h"
hysteresis = 3

[channels.slack]
kind = "slack"
url_env = "TS_TEST_SLACK_URL"
timeout_s = 3

[channels.hook]
url = "http://127.0.0.1:8080/alerts"
headers = { Authorization = "env:TS_TEST_TOKEN", X-Team = "search" }

[[monitor]]
name = "faithfulness-prod"
description = "grounded answers"
score = "faithfulness"
statistic = "mean"
window = "1d"
where = { environment = "production", release = "v2", "metadata.route" = "search" }
threshold = 0.8
direction = "below"
warning = 0.85
min_n = 50
alpha = 0.05
rule = "fixed"
no_data = "alert"
renotify = "1h"
hysteresis = 1
notify = ["slack", "hook"]

[[monitor]]
name = "relevance.vs_last_week"
score = "answer_relevance"
where.metadata.tenant = "acme"
baseline = "7d"
min_effect = 0.05

[[monitor]]
name = "backlog"
score = "backlog_age"
threshold = "15m"
notify = []
"""


@pytest.fixture
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TS_TEST_SLACK_URL", SLACK_URL)
    monkeypatch.setenv("TS_TEST_TOKEN", "Bearer tok-123456789")


def write(tmp_path: Path, text: str, name: str = DEFAULT_FILE) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def errors_of(path: Path) -> list[str]:
    with pytest.raises(MonitorConfigError) as info:
        load_monitors(path)
    assert str(info.value) == "\n".join(info.value.errors)
    return list(info.value.errors)


# -- a full file -------------------------------------------------------------------------------
def test_full_file_loads_with_defaults_applied_and_round_trips(tmp_path: Path,
                                                               secrets: None) -> None:
    path = write(tmp_path, FULL)
    ms = load_monitors(path)
    assert ms.source == str(path)
    assert [m.name for m in ms] == ["faithfulness-prod", "relevance.vs_last_week", "backlog"]

    m = ms.monitor("faithfulness-prod")
    assert (m.score, m.statistic, m.window, m.window_s) == ("faithfulness", "mean", "1d", 86400)
    assert m.where == {"environment": "production", "metadata.route": "search",
                       "release": "v2"}
    assert (m.threshold, m.direction, m.warning, m.baseline, m.min_effect) == (
        0.8, "below", 0.85, None, None)
    assert (m.min_n, m.alpha, m.rule, m.no_data, m.renotify, m.renotify_s, m.hysteresis) == (
        50, 0.05, "fixed", "alert", "1h", 3600, 1)
    assert m.notify == ("slack", "hook") and m.condition == "threshold"
    assert m.description == "grounded answers" and not m.is_pipeline_figure

    # [defaults] fill what a monitor leaves out; a nested where.metadata table is flattened
    r = ms.monitor("relevance.vs_last_week")
    assert (r.window, r.min_n, r.alpha, r.no_data, r.renotify, r.hysteresis) == (
        "2h", 40, 0.01, "ok", "12h", 3)
    assert r.notify == ("slack",) and r.rule == "anytime"
    assert r.where == {"metadata.tenant": "acme"}
    assert (r.condition, r.baseline, r.baseline_s, r.min_effect) == (
        "baseline", "7d", 7 * 86400, 0.05)
    assert r.direction is None  # resolved later from the metric
    assert r.direction_for(True) == "below" and r.direction_for(False) == "above"

    b = ms.monitor("backlog")
    assert b.is_pipeline_figure and b.threshold == 900.0 and b.direction == "above"
    assert b.notify == () and ms.channels_for(b) == ()

    slack, hook = ms.channel("slack"), ms.channel("hook")
    assert (slack.kind, slack.url, slack.url_env, slack.timeout_s) == (
        "slack", SLACK_URL, "TS_TEST_SLACK_URL", 3.0)
    assert (hook.kind, hook.url, hook.timeout_s) == ("webhook", "http://127.0.0.1:8080/alerts",
                                                     10.0)
    assert hook.headers == {"Authorization": "env:TS_TEST_TOKEN", "X-Team": "search"}
    assert hook.resolved_headers == {"Authorization": "Bearer tok-123456789",
                                     "X-Team": "search"}
    assert ms.channels_for(m) == (slack, hook)

    # JSON out and back in: the same set; secrets from the environment are not in the JSON
    data = json.loads(json.dumps(ms.to_json()))
    text = json.dumps(data)
    assert SLACK_URL not in text and "tok-123456789" not in text
    again = monitors_from_objects(data)
    assert again == ms and again.source == ms.source
    assert again.channel("hook").resolved_headers == hook.resolved_headers
    assert pickle.loads(pickle.dumps(ms)) == ms
    # the definition hash follows what defines the test, not who is told
    assert dataclasses.replace(m, notify=()).definition_hash() == m.definition_hash()
    assert dataclasses.replace(m, alpha=0.01).definition_hash() != m.definition_hash()


def test_the_documented_example_file_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACESCORE_SLACK_WEBHOOK_URL", SLACK_URL)
    monkeypatch.setenv("TRACESCORE_INCIDENT_WEBHOOK_URL", "https://incidents.example.com/hook")
    monkeypatch.setenv("TRACESCORE_INCIDENT_TOKEN", "Bearer example-token")
    ms = load_monitors(EXAMPLE)
    assert len(ms) >= 6 and {c.kind for c in ms.channels} == {"slack", "webhook"}
    assert {m.condition for m in ms} == {"threshold", "baseline"}
    assert {m.score for m in ms} & set(PIPELINE_FIGURES)
    # its scores are real built-in metrics, and its metadata segment is the declared one
    metrics = [registry.get(n) for n in ("faithfulness", "answer_relevance", "hallucination")]
    known = {name: m.higher_is_better for m in metrics for name in m.names()}
    ms.check_against(known, ["route"])
    text = EXAMPLE.read_text()
    for key in [f.name for f in dataclasses.fields(Monitor)] + ["url_env", "headers",
                                                                 "timeout_s", "[defaults]"]:
        assert key in text, f"the example does not document {key}"


# -- every key's bad value ---------------------------------------------------------------------
BAD_MONITOR = [
    ("name", '"has space"', "is not a name"),
    ("score", '""', "must be a non-empty string"),
    ("score", "3", "must be a non-empty string"),
    ("statistic", '"median"', "is not one of mean, rate"),
    ("statistic", '"fail_rte"', "did you mean 'fail_rate'?"),
    ("window", '"5x"', "'5x' is not a duration (use a number and a unit: 30m, 1h, 1d, 1w)"),
    ("window", "3600", "3600 is not a duration"),
    ("window", '"1m"', "shorter than the minimum 5m"),
    ("window", '"0h"', "must be longer than 0"),
    ("where", '"production"', "must be a table"),
    ("where", '{ enviroment = "prod" }', "did you mean 'environment'?"),
    ("where", '{ "metadata." = "x" }', "unknown dimension"),
    ("where", '{ "metadata.version" = 3 }', 'the value must be a string (write "3")'),
    ("threshold", '"high"', "must be a number"),
    ("threshold", "nan", "must be a number"),
    ("direction", '"down"', "is not one of below, above"),
    ("warning", '"x"', "must be a number"),
    ("min_n", "0", "must be a whole number >= 1"),
    ("min_n", "2.5", "must be a whole number >= 1"),
    ("min_n", "true", "must be a whole number >= 1"),
    ("alpha", "0.5", "between 0 and 0.5"),
    ("alpha", "0", "between 0 and 0.5"),
    ("rule", '"sequential"', "is not one of anytime, fixed"),
    ("no_data", '"ignore"', "is not one of no_data, ok, alert"),
    ("renotify", '"soon"', "is not a duration"),
    ("renotify", '"30s"', "shorter than the minimum 5m"),
    ("hysteresis", "0", "must be a whole number >= 1"),
    ("notify", "[1]", "must be a string"),
    ("notify", '["pager"]', "no channel 'pager' (did you mean 'pagerx'?)"),
    ("notify", '["pagerx", "pagerx"]', "names a channel twice"),
    ("notify", "{ a = 1 }", "must be a list of channel names"),
    ("description", "12", "must be a string"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_MONITOR)
def test_a_bad_value_names_the_file_the_monitor_and_the_key(
        tmp_path: Path, key: str, value: str, message: str) -> None:
    keys = {"name": '"m1"', "score": '"faithfulness"', "threshold": "0.8", key: value}
    body = "\n".join(f"{k} = {v}" for k, v in keys.items())
    path = write(tmp_path, f'[channels.pagerx]\nurl = "https://x.example/h"\n\n'
                           f"[[monitor]]\n{body}\n")
    errors = errors_of(path)
    label = f"monitor {value.strip(chr(34))!r}" if key == "name" else "monitor 'm1'"
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{path}: {label}: {key}: "), errors
    assert message in errors[0]


BAD_CONDITION = [
    ({}, "threshold", "a monitor needs a condition"),
    ({"threshold": "0.8", "baseline": '"7d"'}, "baseline", "not both"),
    ({"baseline": '"last_week"'}, "baseline", "is not a baseline (use previous_window"),
    ({"baseline": '"previous_windw"'}, "baseline", "did you mean 'previous_window'?"),
    ({"baseline": '"1m"'}, "baseline", "is not a baseline"),
    ({"threshold": "0.8", "min_effect": "0.05"}, "min_effect", "only with a baseline"),
    ({"baseline": '"7d"', "min_effect": "0"}, "min_effect", "must be more than 0"),
    ({"baseline": '"7d"', "warning": "0.9"}, "warning", "needs a threshold"),
    ({"threshold": "0.8", "direction": '"below"', "warning": "0.7"}, "warning",
     "must be above the threshold"),
    ({"threshold": "0.2", "statistic": '"fail_rate"', "warning": "0.3"}, "warning",
     "must be below the threshold"),
    ({"threshold": "1.5", "statistic": '"rate"'}, "threshold", "rate is a share, in [0, 1], got 1.5"),
    ({"threshold": '"15m"'}, "threshold", "must be a number"),
    ({"baseline": '"7d"', "statistic": '"p10"'}, "baseline",
     "a baseline compares mean, rate or fail_rate, not p10"),
]


@pytest.mark.parametrize(("keys", "key", "message"), BAD_CONDITION)
def test_a_bad_condition_names_the_key(tmp_path: Path, keys: dict[str, str], key: str,
                                       message: str) -> None:
    body = "\n".join(f"{k} = {v}" for k, v in {"name": '"m1"', "score": '"faithfulness"',
                                                  **keys}.items())
    errors = errors_of(write(tmp_path, f"[[monitor]]\n{body}\n"))
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{tmp_path / DEFAULT_FILE}: monitor 'm1': {key}: "), errors
    assert message in errors[0]


BAD_FIGURE = [
    ('score = "error_rate"\nthreshold = 2', "threshold", "error_rate is a share, in [0, 1], got 2"),
    ('score = "dropped_records"\nthreshold = -1', "threshold", "is never negative"),
    ('score = "backlog_age"\nthreshold = "soon"', "threshold", "is not a duration"),
    ('score = "backlog_age"\nthreshold = 60\nstatistic = "p90"', "statistic",
     "is a pipeline figure: use mean"),
    ('score = "judge_cost_per_day"\nthreshold = 5\nwhere = { release = "v1" }', "where",
     "has no segments"),
    ('score = "error_rate"\nthreshold = 0.1\nwhere = { judge_model = "x" }', "where",
     "is not split by 'judge_model'"),
    ('score = "backlog_age"\nbaseline = "previous_release"', "baseline",
     "is not split by release"),
]


@pytest.mark.parametrize(("body", "key", "message"), BAD_FIGURE)
def test_pipeline_figures_take_only_what_they_have(tmp_path: Path, body: str, key: str,
                                                   message: str) -> None:
    errors = errors_of(write(tmp_path, f'[[monitor]]\nname = "f"\n{body}\n'))
    assert len(errors) == 1 and f"monitor 'f': {key}: " in errors[0], errors
    assert message in errors[0]


BAD_CHANNEL = [
    ('kind = "pagerduty"\nurl = "https://x.example"', "kind", "is not one of webhook, slack"),
    ('url = "ftp://x.example/a"', "url", "is not an http(s) URL"),
    ('url = "https://"', "url", "is not an http(s) URL"),
    ("timeout_s = 1", "url", "give url = 'https://...' or url_env"),
    ('url = "https://x.example"\nurl_env = "TS_TEST_SLACK_URL"', "url", "not both"),
    ('url_env = "TS_TEST_UNSET_VAR"', "url_env",
     "the environment variable TS_TEST_UNSET_VAR is not set"),
    ('url_env = "not a name"', "url_env", "is not the name of an environment variable"),
    ('url_env = "TS_TEST_NOT_A_URL"', "url_env",
     "the environment variable TS_TEST_NOT_A_URL does not hold an http(s) URL"),
    ('url = "https://x.example"\ntimeout_s = 0', "timeout_s", "must be more than 0"),
    ('url = "https://x.example"\ntimeout_s = "10s"', "timeout_s", "must be a number"),
    ('url = "https://x.example"\nheaders = ["a"]', "headers", "must be a table"),
    ('url = "https://x.example"\nheaders = { A = 1 }', "headers",
     "A: the value must be a string"),
    ('url = "https://x.example"\nheaders = { "bad name" = "x" }', "headers",
     "is not a header name"),
    ('url = "https://x.example"\nheaders = { A = "env:TS_TEST_UNSET_VAR" }', "headers",
     "A: the environment variable TS_TEST_UNSET_VAR is not set"),
    ('url = "https://x.example"\nheaders = { A = "env:TS_TEST_MULTILINE" }', "headers",
     "A: the value must be one line"),
    ('url = "https://x.example"\ntimout_s = 3', "timout_s",
     "unknown key (did you mean 'timeout_s'?)"),
    ('url = "https://x.example"\nname = "other"', "name", "differs from the table name"),
]


@pytest.mark.parametrize(("body", "key", "message"), BAD_CHANNEL)
def test_a_bad_channel_names_the_file_the_channel_and_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, secrets: None, body: str, key: str,
        message: str) -> None:
    monkeypatch.delenv("TS_TEST_UNSET_VAR", raising=False)
    monkeypatch.setenv("TS_TEST_NOT_A_URL", "hooks.slack.com/services/T0/B0/never-shown")
    monkeypatch.setenv("TS_TEST_MULTILINE", "a\r\nX-Injected: 1")
    path = write(tmp_path, f"[channels.ops]\n{body}\n")
    errors = errors_of(path)
    assert len(errors) == 1, errors
    assert errors[0].startswith(f"{path}: channel 'ops': {key}: "), errors
    assert message in errors[0]
    assert "never-shown" not in errors[0]  # an env value is never echoed


# -- several problems, unknown keys ------------------------------------------------------------
def test_every_problem_of_a_file_is_reported_together(tmp_path: Path) -> None:
    path = write(tmp_path, """
[defaults]
window = "forever"
alpah = 0.1

[channels.ops]
url = "mailto:ops@example.com"

[[monitor]]
name = "a"
score = "faithfulness"
treshold = 0.8
window = "5x"

[[monitor]]
name = "a"
score = "faithfulness"
threshold = 0.8
alpha = 2
notify = ["ops", "pager"]

[[monitor]]
score = "faithfulness"
threshold = 0.8
""")
    errors = errors_of(path)
    p = str(path)
    expected = [
        f"{p}: defaults: window: 'forever' is not a duration",
        f"{p}: defaults: alpah: unknown key (did you mean 'alpha'?)",
        f"{p}: channel 'ops': url: the URL is not an http(s) URL",
        f"{p}: monitor 'a': treshold: unknown key (did you mean 'threshold'?)",
        f"{p}: monitor 'a': window: '5x' is not a duration",
        f"{p}: monitor 'a': threshold: a monitor needs a condition",
        f"{p}: monitor 'a': alpha: must be between 0 and 0.5",
        f"{p}: monitor #3: name: missing",
        f"{p}: monitor 'a': name: monitor #1 has this name too; names must be unique",
        f"{p}: monitor 'a': notify: no channel 'pager' (channels: ops)",
    ]
    assert len(errors) == len(expected), "\n".join(errors)
    for line in expected:
        assert any(e.startswith(line) for e in errors), (line, errors)
    # a broken channel is still declared: "notify = ['ops']" is not reported as unknown
    assert not any("no channel 'ops'" in e for e in errors)
    # the bad default is reported once, not again for every monitor
    assert sum("forever" in e for e in errors) == 1


def test_a_default_naming_a_missing_channel_is_reported_once(tmp_path: Path) -> None:
    monitors = "".join(f'[[monitor]]\nname = "m{i}"\nscore = "bleu"\nthreshold = 0.2\n'
                       for i in range(3))
    errors = errors_of(write(tmp_path, f'[defaults]\nnotify = ["opps"]\n'
                                       f'[channels.ops]\nurl = "https://x.example"\n{monitors}'))
    assert errors == [f"{tmp_path / DEFAULT_FILE}: defaults: notify: no channel 'opps' "
                      "(did you mean 'ops'?)"]


def test_unknown_tables_and_keys_get_a_suggestion(tmp_path: Path) -> None:
    errors = errors_of(write(tmp_path, """
[[monitors]]
name = "x"

[channel.ops]
url = "https://x.example"

[defaults]
threshold = 0.5
"""))
    assert errors == [
        f"{tmp_path / DEFAULT_FILE}: monitors: unknown table (did you mean 'monitor'?) "
        "(use [[monitor]], [channels.NAME] and [defaults])",
        f"{tmp_path / DEFAULT_FILE}: channel: unknown table (did you mean 'channels'?) "
        "(use [[monitor]], [channels.NAME] and [defaults])",
        f"{tmp_path / DEFAULT_FILE}: defaults: threshold: unknown key (it cannot have a "
        "default: set it on each monitor)",
    ]


def test_a_missing_or_malformed_file_is_a_config_error(tmp_path: Path) -> None:
    assert errors_of(tmp_path / "none.toml") == [f"{tmp_path / 'none.toml'}: no such file"]
    [line] = errors_of(write(tmp_path, '[[monitor]]\nname = "x\n'))
    assert line.startswith(f"{tmp_path / DEFAULT_FILE}: not valid TOML: ")
    assert "line 2" in line
    [line] = errors_of(write(tmp_path, "monitor = 3\n"))
    assert line.endswith("monitor: must be a list of monitors ([[monitor]] tables)")
    [line] = errors_of(write(tmp_path, "monitor = [1]\n"))
    assert "monitor #1: must be a table of keys, got int" in line


def test_a_file_with_only_a_monitor_table_and_no_channels(tmp_path: Path) -> None:
    # a single [monitor] table (not [[monitor]]) is read as one monitor
    ms = load_monitors(write(tmp_path, '[monitor]\nname = "x"\nscore = "bleu"\n'
                                       'threshold = 0.3\n'))
    assert [m.name for m in ms] == ["x"] and ms.channels == ()


# -- url_env -----------------------------------------------------------------------------------
def test_url_env_is_resolved_at_load_and_kept_out_of_repr_json_and_logs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, '[channels.s]\nkind = "slack"\nurl_env = "TS_TEST_SLACK_URL"\n')
    monkeypatch.delenv("TS_TEST_SLACK_URL", raising=False)
    assert errors_of(path) == [
        f"{path}: channel 's': url_env: the environment variable TS_TEST_SLACK_URL is not set"]

    monkeypatch.setenv("TS_TEST_SLACK_URL", SLACK_URL)
    ch = load_monitors(path).channel("s")
    assert ch.url == SLACK_URL and ch.url_env == "TS_TEST_SLACK_URL"
    assert SLACK_URL not in repr(ch)
    assert ch.to_json() == {"name": "s", "kind": "slack", "url": None,
                            "url_env": "TS_TEST_SLACK_URL", "timeout_s": 10.0, "headers": {}}
    assert SLACK_URL not in scrub(f"POST {SLACK_URL} failed")  # registered with the scrubber

    # a Channel built in Python resolves the same way, and again when rebuilt
    monkeypatch.setenv("TS_TEST_SLACK_URL", SLACK_URL + "2")
    assert Channel("s", "slack", url_env="TS_TEST_SLACK_URL").url == SLACK_URL + "2"
    assert dataclasses.replace(ch, timeout_s=2).url == SLACK_URL + "2"
    monkeypatch.delenv("TS_TEST_SLACK_URL")
    with pytest.raises(MonitorConfigError, match=r"^channel 's': url_env: the environment "
                                                 r"variable TS_TEST_SLACK_URL is not set$"):
        Channel("s", "slack", url_env="TS_TEST_SLACK_URL")


# -- init(monitors=...) ------------------------------------------------------------------------
def test_init_accepts_dicts_monitors_channels_a_layout_a_set_and_a_path(
        tmp_path: Path, secrets: None) -> None:
    ops = Channel("ops", url="https://ops.example/hook")
    ms = monitors_from_objects([
        {"name": "f", "score": "faithfulness", "threshold": 0.7, "notify": "ops"},
        Monitor("r", "answer_relevance", baseline="previous_window", window="6h"),
        ops,
    ])
    assert ms.source == "init(monitors=...)"
    assert [m.name for m in ms] == ["f", "r"] and ms.channels == (ops,)
    assert ms.monitor("f").notify == ("ops",) and ms.monitor("r").min_effect == 0.02
    assert ms.monitor("f") == Monitor("f", "faithfulness", threshold=0.7, notify=["ops"])

    layout = monitors_from_objects({
        "defaults": {"window": "1h", "notify": ["ops"]},
        "channels": {"ops": {"url_env": "TS_TEST_SLACK_URL", "kind": "slack"}},
        "monitor": [{"name": "f", "score": "faithfulness", "threshold": 0.7, "warning": None}],
    })
    assert layout.monitor("f").window == "1h" and layout.channel("ops").url == SLACK_URL
    assert monitors_from_objects(layout) is layout

    path = write(tmp_path, FULL)
    assert monitors_from_objects(path) == load_monitors(path)
    assert monitors_from_objects(str(path)).source == str(path)


def test_init_errors_name_init_the_monitor_and_the_key() -> None:
    with pytest.raises(MonitorConfigError) as info:
        monitors_from_objects([
            {"name": "f", "score": "faithfulness", "threshold": 0.7, "windw": "1h"},
            {"name": "g", "score": "faithfulness", "threshold": 0.7, "notify": ["ops"]},
            "not a monitor",
        ])
    assert info.value.errors == (
        "init(monitors=...): monitor 'f': windw: unknown key (did you mean 'window'?)",
        "init(monitors=...): monitor #3: must be a table of keys, got str",
        "init(monitors=...): monitor 'g': notify: no channel 'ops' (no channels are declared)",
    )
    with pytest.raises(MonitorConfigError, match=r"^init\(monitors=\.\.\.\): expected a list"):
        monitors_from_objects(42)  # type: ignore[arg-type]
    with pytest.raises(MonitorConfigError, match="monitor 'x': name: monitor #1 has this name"):
        monitors_from_objects([Monitor("x", "bleu", threshold=0.2),
                               Monitor("x", "rouge", threshold=0.2)])
    with pytest.raises(MonitorConfigError, match="channel 'a': name: the Channel is called 'b'"):
        monitors_from_objects({"channels": {"a": Channel("b", url="https://x.example")}})


def test_a_monitor_built_in_python_is_validated_with_every_problem() -> None:
    with pytest.raises(MonitorConfigError) as info:
        Monitor("m", "faithfulness", window="5x", alpha=1.0)  # no condition either
    assert info.value.errors == (
        "monitor 'm': window: '5x' is not a duration (use a number and a unit: 30m, 1h, 1d, 1w)",
        "monitor 'm': alpha: must be between 0 and 0.5 (the accepted chance of a false alarm), "
        "got 1.0",
        "monitor 'm': threshold: a monitor needs a condition: threshold = <number>, or "
        "baseline = 'previous_window' | 'previous_release' | '7d'",
    )
    m = Monitor("m", "faithfulness", threshold=1, where={"release": "v1"}, notify=["a"])
    assert m.threshold == 1.0 and isinstance(m.threshold, float) and m.notify == ("a",)
    assert m.where == {"release": "v1"} and hash(m) == hash(dataclasses.replace(m))
    with pytest.raises(dataclasses.FrozenInstanceError):
        m.score = "bleu"  # type: ignore[misc]
    with pytest.raises(MonitorConfigError, match="notify: no channel 'a'"):
        MonitorSet((m,))


# -- check_against -----------------------------------------------------------------------------
def test_check_against_names_unknown_scores_and_undeclared_segments(tmp_path: Path) -> None:
    path = write(tmp_path, """
[[monitor]]
name = "typo"
score = "faithfulnes"
threshold = 0.8

[[monitor]]
name = "unknown"
score = "latency"
threshold = 0.8

[[monitor]]
name = "segment"
score = "faithfulness"
where = { "metadata.tenat" = "acme", environment = "prod" }
threshold = 0.8

[[monitor]]
name = "figure"
score = "skip_rate"
where = { "metadata.tenant" = "acme" }
threshold = 0.3
""")
    ms = load_monitors(path)
    with pytest.raises(MonitorConfigError) as info:
        ms.check_against(["faithfulness", "answer_relevance"], ["metadata.tenant", "route"])
    assert info.value.errors == (
        f"{path}: monitor 'typo': score: unknown score 'faithfulnes' (did you mean "
        "'faithfulness'?)",
        f"{path}: monitor 'unknown': score: unknown score 'latency' (known: "
        "answer_relevance, faithfulness; pipeline figures: error_rate, skip_rate, "
        "dropped_records, backlog_age, judge_cost_per_day, capture_degraded)",
        f"{path}: monitor 'segment': where: segment 'metadata.tenat' is not declared: add "
        "'tenat' to init(segments=[...]) (did you mean 'metadata.tenant'?)",
    )
    # bare keys as init(segments=[...]) names them work too; built-in dimensions are known
    ok = monitors_from_objects([m for m in ms if m.name in ("segment", "figure")])
    ok.check_against({"faithfulness"}, ["tenat", "tenant"])
    with pytest.raises(MonitorConfigError, match="'metadata.tenant' is not declared"):
        ok.check_against({"faithfulness"}, [])


def test_check_against_with_directions_resolves_them(tmp_path: Path) -> None:
    ms = monitors_from_objects([
        {"name": "refusals", "score": "rgb_rejection", "threshold": 0.3},
        {"name": "halluc", "score": "hallucination", "threshold": 0.3, "warning": 0.4},
        {"name": "faith", "score": "faithfulness", "threshold": 0.8, "warning": 0.9},
        {"name": "set", "score": "rgb_rejection", "threshold": 0.3, "direction": "above"},
    ])
    with pytest.raises(MonitorConfigError) as info:
        ms.check_against({"rgb_rejection": None, "hallucination": False, "faithfulness": True},
                         [])
    assert info.value.errors == (
        "init(monitors=...): monitor 'refusals': direction: 'rgb_rejection' has no better "
        "direction; set direction = 'below' (low values are bad) or 'above'",
        "init(monitors=...): monitor 'halluc': warning: with direction 'above' the warning "
        "level (0.4) must be below the threshold (0.3), so that it is crossed first",
    )
    # a plain collection of names checks the names only
    ms.check_against(["rgb_rejection", "hallucination", "faithfulness"], [])
    with pytest.raises(MonitorConfigError, match="has no better direction"):
        ms.monitor("refusals").direction_for(None)


# -- durations ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "seconds"), [
    ("30m", 1800), ("1h", 3600), ("1d", 86400), ("1w", 604800), ("45s", 45), ("1.5h", 5400),
    (" 2 d ", 172800)])
def test_duration_parses_a_number_and_a_unit(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize("text", ["5x", "", "h", "1", "-1h", "1 hour", "1H", "0m", 5])
def test_duration_refuses_anything_else(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        duration(text)  # type: ignore[arg-type]
