"""A monitors file's channels are checked at load for what would only fail at delivery, and
its secrets stay secret: literal header values, a mistyped Slack URL, user:password@; a
file nested too deeply is a configuration error (exit 2), not an ALERT (exit 1)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from tracescore._internal.secrets import install_log_filter, scrub
from tracescore.cli import main
from tracescore.monitor import notify as N
from tracescore.monitor.config import Channel, MonitorConfigError, load_monitors
from tracescore.store import open_store

MONITOR = """
[[monitor]]
name = "q"
score = "quality"
threshold = 0.8
notify = ["ops"]
"""


def _file(tmp_path: Path, channel: str) -> Path:
    p = tmp_path / "mon.toml"
    p.write_text(f"[channels.ops]\n{channel}\n{MONITOR}", encoding="utf-8")
    return p


def _errors(path: Path) -> list[str]:
    with pytest.raises(MonitorConfigError) as info:
        load_monitors(path)
    return info.value.errors


def test_a_literal_header_value_is_a_secret(tmp_path: Path,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """Before: only ``env:NAME`` values were registered with the scrubber; a receiver that
    echoed a literal token got it stored in the outbox and logged."""
    token = "lit3ral-T0ken-never-logged"
    path = _file(tmp_path, 'url = "https://hooks.example.com/x"\n'
                           f'headers = {{ Authorization = "Token {token}", '
                           '"Content-Type" = "application/json", X-Team = "searchteam", '
                           'X-Trace = "q9Z3v7R1k5M2x8P4w6" }')
    load_monitors(path)
    assert token not in scrub(f"the receiver said: Token {token}")
    assert "q9Z3v7R1k5M2x8P4w6" not in scrub("echo q9Z3v7R1k5M2x8P4w6")  # shaped like a key
    # plain words are not secrets: scrubbing them would garble every line that holds them
    assert scrub("sent application/json for searchteam") == \
        "sent application/json for searchteam"
    caplog.set_level(logging.DEBUG)
    install_log_filter()  # (what init and the CLI do)
    logging.getLogger("tracescore").warning("echo %s", token)
    assert not [r for r in caplog.records if token in r.getMessage()]


def test_a_mistyped_slack_url_is_not_printed(tmp_path: Path) -> None:
    secret = "T0SECRET/B0SECRET/xoxSECRETtoken"
    for url in (f"htps://hooks.slack.com/services/{secret}",
                f"https://hooks.slack.com/services/{secret} ",
                f"https://hooks.slack.com:44x3/services/{secret}"):
        errors = _errors(_file(tmp_path, f'kind = "slack"\nurl = "{url}"'))
        assert len(errors) == 1 and "channel 'ops': url:" in errors[0], errors
        assert "SECRET" not in errors[0], errors


@pytest.mark.parametrize(("channel", "said"), [
    ('url = "https://hooks.example.com/x"\nheaders = { X-Team = "équipe→ops" }',
     "X-Team: the value must be Latin-1 text"),
    ('url = "https://hooks.example.com/équipe"', "has non-ASCII characters"),
    ('url = "https://bücher.example/x"', "has non-ASCII characters"),
    ('url = "https://hooks.example.com/a\\u0000b"', "has blanks or control characters"),
])
def test_what_http_cannot_carry_is_refused_at_load(tmp_path: Path, channel: str,
                                                   said: str) -> None:
    """Before: the check passed, ``check`` then failed in http.client (exit 2 instead of 1)
    and the notification stayed pending for ever."""
    errors = _errors(_file(tmp_path, channel))
    assert len(errors) == 1 and said in errors[0], errors


def test_a_channel_made_in_code_with_a_non_latin1_header_fails_for_good() -> None:
    """The same checks guard a Channel built in Python; and deliver itself refuses such a
    header permanently instead of leaving the row pending."""
    with pytest.raises(MonitorConfigError, match="Latin-1"):
        Channel("ops", url="https://hooks.example.com/x", headers={"X-Team": "→"})
    with pytest.raises(N.DeliveryError) as info:
        N.deliver("http://127.0.0.1:9/x", {"a": 1}, headers={"X-Team": "→"}, timeout_s=2,
                  channel="ops")
    assert info.value.permanent


def test_userinfo_in_a_url_is_accepted_and_its_password_is_a_secret(tmp_path: Path) -> None:
    password = "s3cret-Pa55-in-url"
    load_monitors(_file(tmp_path, f'url = "https://ops:{password}@hooks.example.com/x"'))
    assert password not in scrub(f"login failed for ops:{password}")


def test_a_deeply_nested_file_is_a_config_error_and_check_exits_2(tmp_path: Path) -> None:
    deep = tmp_path / "deep.toml"
    deep.write_text("x = " + "[" * 100_000 + "]" * 100_000 + "\n")
    errors = _errors(deep)
    assert list(errors) == [f"{deep}: not a monitors file (nested too deeply)"]
    db = tmp_path / "ts.db"
    open_store(str(db)).close()
    r = CliRunner().invoke(main, ["check", "--db", str(db), "--monitors", str(deep)])
    assert r.exit_code == 2, r.output
    assert "nested too deeply" in r.output


def test_a_receiver_echoing_a_literal_header_does_not_get_it_stored(tmp_path: Path) -> None:
    """The error text (what the outbox stores and ``check`` prints) is scrubbed of a header
    value written literally in the file, when a receiver's error page echoes it."""
    from test_monitor_notify import Receiver

    token = "echoed-L1teral-token-42"
    r = Receiver(script=[(500, {}, f"bad request: X-Api-Token={token}; Token {token}")])
    try:
        path = _file(tmp_path, f'url = "{r.url()}"\nheaders = {{ X-Api-Token = "{token}" }}')
        (ch,) = load_monitors(path).channels
        with pytest.raises(N.DeliveryError) as info:
            N.deliver(ch.url, {"a": 1}, headers=ch.resolved_headers, timeout_s=5,
                      channel="ops")
        assert info.value.reason.startswith("channel ops: HTTP 500")
        assert token not in info.value.reason
        (got,) = r.wait_for(1)
        assert got["headers"]["X-Api-Token"] == token  # sent as written
    finally:
        r.stop()
