"""``agentkeep.host._http``: the host name a request is sent to, as starlette's
``request.url.hostname`` reads it (the keyless host's loopback check asks it on every request)."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from starlette.requests import Request

from agentkeep.host._http import is_loopback, requested_host


def scope(headers: list[tuple[bytes, bytes]], server: tuple[str, int] | None = ("127.0.0.1", 8000)) -> Any:
    return {
        "type": "http",
        "method": "POST",
        "scheme": "http",
        "path": "/agents/chat",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "server": server,
    }


NAMES = st.sampled_from(
    [
        "localhost",
        "LOCALHOST",
        "127.0.0.1",
        "[::1]",
        "[::1]:8000",
        "127.0.0.1:8000",
        "localhost:1",
        "evil.example",
        "Evil.Example:80",
        "127.0.0.1.nip.io",
        "[fe80::1]",
        "user@127.0.0.1",
        "a@b@localhost",
        "",
        ":80",
        "[::1",
        "127.0.0.1:",
        "xn--bcher-kva.example",
    ]
)
HOST_HEADERS = NAMES | st.text(st.characters(codec="latin-1", exclude_characters="/?#\\"), max_size=30)


@given(HOST_HEADERS)
def test_the_requested_host_is_starlettes_url_hostname(header: str) -> None:
    request_scope = scope([(b"host", header.encode("latin-1"))])
    assert requested_host(request_scope) == Request(request_scope).url.hostname


def test_the_first_valid_host_header_counts_and_else_the_servers_address() -> None:
    assert requested_host(scope([(b"host", b"localhost:8000"), (b"host", b"evil.example")])) == "localhost"
    assert requested_host(scope([])) == "127.0.0.1"
    assert requested_host(scope([(b"host", b"a@b@evil.example")])) == "127.0.0.1"  # not a host: the server's
    assert requested_host(scope([], server=None)) is None


def test_only_loopback_names_pass_the_keyless_hosts_check() -> None:
    for header, loopback in [
        (b"127.0.0.1:8000", True),
        (b"[::1]:8000", True),
        (b"LOCALHOST", True),
        (b"evil.example", False),
        (b"127.0.0.1.nip.io", False),
        (b"[::1", True),  # not a host name: the server's own address counts
    ]:
        assert is_loopback(requested_host(scope([(b"host", header)]))) is loopback, header
