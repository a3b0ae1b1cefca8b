"""Secret values and credentials scrubbed from the log lines of the MCP SDK and HTTP clients."""

from __future__ import annotations

import logging
import uuid

import pytest

from hatchway.observability.log_redaction import install_log_redaction
from hatchway.redaction import Redactor


def test_library_log_lines_lose_known_secrets_and_credential_headers(
    caplog: pytest.LogCaptureFixture, log_secrets: Redactor
) -> None:
    secret, cookie = f"vault-{uuid.uuid4().hex}", uuid.uuid4().hex
    log_secrets.add(secret)
    install_log_redaction()
    caplog.set_level(logging.DEBUG)

    logging.getLogger("mcp.client.streamable_http").debug("Sending client message: %s", {"q": secret})
    logging.getLogger("httpcore2.http11").debug(
        "receive_response_headers.complete return_value=%r",
        (b"HTTP/1.1", 200, [(b"set-cookie", f"s={cookie}".encode()), (b"content-type", b"text/plain")]),
    )
    logging.getLogger("mcp.client.sse").debug("headers: Authorization: Bearer %s", cookie)
    try:
        raise RuntimeError(f"token {secret} refused")
    except RuntimeError:
        logging.getLogger("httpx").exception("request failed")
    logging.getLogger("hatchway.test").debug("not a library line: %s", "Bearer left-alone-123")

    text = caplog.text
    assert secret not in text and cookie not in text
    assert "Sending client message: {'q': '[REDACTED]'}" in text
    assert "(b'set-cookie', b'[REDACTED]')" in text and "(b'content-type', b'text/plain')" in text
    assert "Authorization: Bearer [REDACTED]" in text and "token [REDACTED] refused" in text
    assert "Bearer left-alone-123" in text  # Hatchway's own lines carry no secrets to begin with


def test_a_short_secret_value_does_not_leave_a_cookie_in_clear(
    caplog: pytest.LogCaptureFixture, log_secrets: Redactor
) -> None:
    cookie = uuid.uuid4().hex
    log_secrets.add("k")  # as a test's provider key, api_key: "k", registers it
    install_log_redaction()
    caplog.set_level(logging.DEBUG)

    logging.getLogger("httpcore2.http11").debug(
        "receive_response_headers.complete return_value=%r",
        (b"HTTP/1.1", 200, [(b"set-cookie", f"s={cookie}".encode())]),
    )

    assert cookie not in caplog.text
