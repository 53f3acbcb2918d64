"""Credentials written into a URL (`http://user:password@host/...`) never reach a message or a file.

The user and password of such a root are sent, as HTTP basic auth, to the root's own origin only
(storage/http.py); every message and every cache identity that names the URL goes through `redact_url`.
"""

from __future__ import annotations

import re

# The userinfo of a URL: everything between "://" and the last "@" of the authority (no "/", "?", "#" in it).
_USERINFO = re.compile(r"(?<=://)[^/?#\s]*@")


def redact_url(text: str) -> str:
    """`text` (a URL, or a message naming URLs) with the user and password of every URL in it replaced by
    `***`: `http://user:secret@host/a` -> `http://***@host/a`."""
    return _USERINFO.sub("***@", text)
