"""Retries of HTTP requests: the pause between attempts, settable so that tests wait milliseconds."""

import time
from pathlib import Path

import pytest
from httpserve import Server

from tfaot_dist.errors import InvalidInput
from tfaot_dist.util import download


def test_backoff_doubles_from_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(download.BACKOFF_ENV, raising=False)
    assert [download.backoff(i) for i in range(3)] == [0.5, 1.0, 2.0]
    monkeypatch.setenv(download.BACKOFF_ENV, "0.25")
    assert [download.backoff(i) for i in range(3)] == [0.25, 0.5, 1.0]


@pytest.mark.parametrize("value", ["0", "-1", "soon"])
def test_invalid_backoff_is_named(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(download.BACKOFF_ENV, value)
    with pytest.raises(
        InvalidInput, match=f"{download.BACKOFF_ENV}: expected a positive number, got '{value}'"
    ):
        download.backoff(0)


def test_retries_pause_as_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two 500s, then the file: three requests, and the two pauses (0.2 s, then 0.4 s) were waited."""
    (tmp_path / "index.json").write_bytes(b"{}")
    server = Server(tmp_path)
    server.fail("/index.json", 2)
    monkeypatch.setenv(download.BACKOFF_ENV, "0.2")
    monkeypatch.setenv(download.RETRIES_ENV, "3")
    try:
        start = time.monotonic()
        assert download.get_bytes(server.url("index.json")) == b"{}"
        assert time.monotonic() - start >= 0.6
        assert server.hits["/index.json"] == 3
    finally:
        server.close()
