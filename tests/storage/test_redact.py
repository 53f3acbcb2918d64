"""redact_url: the user and password of every URL in a text are replaced, nothing else changes."""

from __future__ import annotations

import pytest

from robostream.storage.redact import redact_url


@pytest.mark.parametrize(
    "text, redacted",
    [
        ("http://user:secret@127.0.0.1:8000/ds/meta/info.json", "http://***@127.0.0.1:8000/ds/meta/info.json"),
        ("https://token@example.com/a", "https://***@example.com/a"),
        ("http://u:p@ss@host/x", "http://***@host/x"),  # an unencoded "@" in the password
        ("a http://u:p@h/x and https://v:q@k/y?mail=a@b#c@d", "a http://***@h/x and https://***@k/y?mail=a@b#c@d"),
        ("http://host/path@v2", "http://host/path@v2"),  # an "@" in the path is no userinfo
        ("s3://bucket/key", "s3://bucket/key"),
        ("/local/folder/file@1.parquet", "/local/folder/file@1.parquet"),
    ],
)
def test_redact_url(text, redacted):
    assert redact_url(text) == redacted
