"""Cache and saved-state entries that check themselves when read back.

An entry is one file of two lines: a JSON header with the envelope's format version, a text naming
the inputs the payload was derived from (a cache key, a config hash and batch) and the SHA-256 of the
second line, the payload as compact JSON. Reading checks all three: an entry that is unreadable,
truncated, changed without its checksum, of another format or derived from other inputs is logged
once, deleted, and reported missing, so the caller recomputes it. Entries are written atomically
(`phazec.util.atomic`).

What this promises: a checksum catches damage (a torn or partial write, a bit flip, a hand edit that
leaves the checksum), not a deliberate edit by someone who can write the cache and recomputes the
SHA-256 (anyone can: it has no key). A cache directory is trusted like the code: `shared_warning`
says so when others can write one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import stat
from pathlib import Path
from typing import Any

from phazec.util import atomic

log = logging.getLogger(__name__)

FORMAT = 1
"""Bumped whenever the envelope changes layout."""


def digest(data: bytes) -> str:
    """The SHA-256 of `data`, in hex."""
    return hashlib.sha256(data).hexdigest()


def write(path: Path, inputs: str, payload: Any) -> None:
    """Write `payload` (plain JSON data) with its inputs and checksum, atomically."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    header = json.dumps({"format": FORMAT, "inputs": inputs, "sha256": digest(body)}).encode()
    atomic.write_bytes(path, header + b"\n" + body)


def read(path: Path, inputs: str) -> Any | None:
    """The payload of the entry at `path` if it is whole and derived from `inputs`; None when there
    is none, or after deleting a bad one (logged)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        _discard(path, f"it cannot be read ({err})")
        return None
    header_line, _, body = raw.partition(b"\n")
    try:
        header = json.loads(header_line)
        fields = (header["format"], header["inputs"], header["sha256"])
    except (ValueError, TypeError, KeyError) as err:
        _discard(path, f"its header is damaged ({type(err).__name__})")
        return None
    if fields != (FORMAT, inputs, digest(body)):
        reason = (
            "it has another format"
            if fields[0] != FORMAT
            else "it was derived from other inputs"
            if fields[1] != inputs
            else "its checksum does not match (truncated or changed)"
        )
        _discard(path, reason)
        return None
    return json.loads(body)


def shared_warning(directory: Path, what: str) -> None:
    """Warn when users other than its owner can write the cache `directory` (named `what`): its entries
    are believed as if the owner wrote them."""
    mode = directory.stat().st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        log.warning(
            "%s %s can be written by other users (mode %o): a cache entry's checksum catches damage, not "
            "an edit by someone who can write the cache, so phazec believes what they write there; use a "
            "directory only you can write (chmod go-w) unless you trust them",
            what, directory, stat.S_IMODE(mode),
        )  # fmt: skip


def _discard(path: Path, reason: str) -> None:
    log.warning("deleting the cache entry %s and computing it again: %s", path, reason)
    path.unlink(missing_ok=True)
