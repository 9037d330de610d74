"""Checking what clients send, so that no input reaches a backend it could break.

PostgreSQL rejects NUL characters, UTF-8 cannot encode lone surrogates (``"\\ud800"``
is valid JSON), ``True`` is an ``int`` in Python, ``1e400`` a float and ``[[[[...``
overflows the parser's stack: each of these would otherwise surface as a 500 somewhere
deep down. Here they are a 400 (and bodies above ``MAX_CONTENT_LENGTH`` a 413).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from flask import Request
from werkzeug.exceptions import ClientDisconnected, HTTPException, RequestEntityTooLarge

from .batching import gevent_time_limit
from .problems import InvalidRequest, SlowBody, quoted

MAX_KEY_LENGTH = 128


class DuplicateKey(ValueError):
    """A JSON object names a key twice; which value was meant is a guess."""


def _without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict, refusing a key named twice (``json`` keeps the last
    silently: ``{"user_id": "ann", "user_id": "bob"}`` bought for bob)."""
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return found


_DECODER = json.JSONDecoder(object_pairs_hook=_without_duplicates)


def read_body(request: Request) -> bytes:
    """The request's body, or a 4xx naming what is wrong with its framing. (A body
    shorter than its Content-Length is ``json_object``'s to refuse: the no-op reads
    what came.)

    **Failure timelines** (a contract audit, raw sockets against gunicorn)::

        client: Transfer-Encoding: chunked, a chunk size "ZZ" (or a chunk without its
                CRLF, or no last chunk before the client's FIN)
        server: gunicorn's parser raises as the body is read: 500 internal_error
        fixed:  400 invalid_request, the parser's complaint named

        client: a chunked body of 100 KB (no Content-Length to refuse it by)
        server: the stream stops at MAX_CONTENT_LENGTH without a word: the first 64 KiB
                bought (201), or a valid body cut mid-string was "not valid JSON"
        fixed:  a chunked body past the limit is 413, as a declared one is (one byte
                more is asked for: a body of exactly the limit is accepted, as it is
                with its Content-Length)
    """
    try:  # one deadline for the whole read: a chunked body's look past the limit and
        # its drain read the socket too (a review: 64 KiB, then silence, held for ever)
        with _within_body_time():
            return _read_body(request)
    except _BodyLate:
        raise SlowBody(f"the request's body did not arrive within {BODY_S:g} s") from None


def _read_body(request: Request) -> bytes:
    try:
        data = request.get_data(cache=True)
    except ClientDisconnected:  # werkzeug's generic 400 named nothing
        raise InvalidRequest("the body ended before it was whole (its last chunk, or the "
                             "bytes its Content-Length announced, never came)") from None
    except HTTPException:  # 413 for a declared length: werkzeug's own
        raise
    except Exception as exc:  # noqa: BLE001 - the server's parser: a malformed chunked body
        raise InvalidRequest(f"the body could not be read ({type(exc).__name__}: "
                             f"{str(exc)[:80]}): send it whole, with Content-Length or "
                             "well-formed chunks") from None
    limit = request.max_content_length
    if request.content_length is None and limit is not None and len(data) >= limit \
            and _more_after(request):
        _drain(request)
        raise RequestEntityTooLarge(too_long_body(limit))
    return data


#: how long a request's body may take to arrive, once its headers have (gevent workers)
BODY_S = 10.0


class _BodyLate(BaseException):
    """Raised by ``_within_body_time``'s timer; not an ``Exception``, which the reads'
    own handlers take for a malformed body (a 400, or a 413 past the limit)."""


def _within_body_time() -> Any:
    """A gevent timer of ``BODY_S`` around a body's read, in a gevent worker; elsewhere
    nothing (a sync server has timeouts of its own). gunicorn bounds the headers' wait,
    not the body's: a POST sending its headers and one byte of its body held its
    connection for ever, and a few thousand such held every slot of a served shop (a
    security audit: /healthz timed out while 250 held a 100-slot worker)."""
    return gevent_time_limit(BODY_S, _BodyLate)


def too_long_body(limit: int | None) -> str:
    """A 413's detail, for a chunked body (here) and a Content-Length (``errors``) both."""
    return f"the body is longer than the {limit} bytes accepted"


def _more_after(request: Request) -> bool:
    """Whether the body goes on past what werkzeug read (it stops at the limit)."""
    stream = request.environ.get("wsgi.input")
    try:
        return stream is not None and bool(stream.read(1))
    except Exception:  # noqa: BLE001 - a malformed rest: more than a whole body
        return True


#: how much of a refused chunked body is read and dropped, so that the refusal reaches a
#: client still sending (closed with unread bytes, a socket answers RST, which may
#: destroy the 413 before the client reads it); past it, the connection just closes
DRAIN_BYTES = 1 << 20


def _drain(request: Request) -> None:
    stream = request.environ.get("wsgi.input")
    left = DRAIN_BYTES
    try:
        while left > 0 and stream is not None and (chunk := stream.read(min(left, 65_536))):
            left -= len(chunk)
    except Exception:  # noqa: BLE001 - a malformed rest: the 413 stands
        return


def json_object(request: Request) -> dict[str, Any]:
    if not request.is_json:
        raise InvalidRequest("send a JSON object with Content-Type: application/json")
    data = read_body(request)
    if request.content_length is not None and len(data) < request.content_length:
        # the client went away mid-body (gunicorn hands over what came): an incomplete
        # message is not acted on (RFC 9112, 8), even if what came parses
        raise InvalidRequest(f"the body ended after {len(data)} of the "
                             f"{request.content_length} bytes its Content-Length announced")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):  # it was "not valid JSON": name the real problem
        raise InvalidRequest(f"Content-Encoding {quoted(encoding)} is not accepted: send the JSON "
                             "body uncompressed")
    coding = _transfer_coding(request)
    if coding is not None:
        raise InvalidRequest(f"Transfer-Encoding {quoted(coding)} is not accepted: send the JSON "
                             "body uncompressed (chunked alone, or a Content-Length)")
    try:  # one decoder of ours: get_json's checks again and its hooks cost more, and
        # json.loads with a hook builds a new decoder per call (twice the parse time)
        body = _DECODER.decode(data.decode(json.detect_encoding(data), "surrogatepass"))
    except RecursionError:  # "[[[[..." deeper than the parser's stack
        raise InvalidRequest("the JSON body is nested too deeply") from None
    except DuplicateKey as exc:
        raise InvalidRequest(f"the JSON body names {quoted(exc.args[0])} twice") from None
    except (json.JSONDecodeError, UnicodeDecodeError):  # not JSON, or not UTF-8/16/32
        raise InvalidRequest("the body is not valid JSON (send a JSON object, UTF-8)") from None
    except ValueError:  # the only other: an integer past Python's 4,300 digits
        raise InvalidRequest("a number in the body has more digits than accepted") from None
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body


def _transfer_coding(request: Request) -> str | None:
    """The first transfer coding of the request besides ``chunked`` (and ``identity``),
    or None. gunicorn undoes the chunking and hands compress, deflate and gzip over
    undecoded (br and the rest are its 501).

    **Failure timelines** (an API fuzz audit, raw sockets against gunicorn)::

        client: Transfer-Encoding: deflate, chunked; the body plain JSON bytes
        server: the codings after chunked were never looked at: 201, bought
        fixed:  400 invalid_request naming 'deflate'

        client: Transfer-Encoding: gzip, chunked; a real gzip body
        server: 400 "the body is not valid JSON", which it was, once decoded
        fixed:  400 invalid_request naming 'gzip', as Content-Encoding's is
    """
    # the WSGI variable itself, as for Idempotency-Key: no headers view on a purchase
    codings = request.environ.get("HTTP_TRANSFER_ENCODING")
    if codings is None:
        return None
    for coding in codings.split(","):
        coding = coding.strip(" \t").lower()
        if coding not in ("", "chunked", "identity"):
            return coding
    return None


#: format characters that real names need: the (non-)joiners of emoji and of Persian
_JOINERS = {"\u200c", "\u200d"}


def is_clean_text(value: str) -> bool:
    """Printable: no control (C0, C1), format (bidi overrides, zero-width space, BOM),
    surrogate, private-use or unassigned characters, nor a line break, so no invisible
    ids. (Ids are then compared as sent, code point by code point: ``"café"`` composed
    and decomposed are two buyers, as ``"abc"`` and ``"abc "`` are.)"""
    if value.isascii():  # the usual id, without a lookup per character: in ASCII only
        return value.isprintable()  # the C0 controls and DEL are category C
    # and no line or paragraph separator (U+2028, U+2029: categories Zl, Zp), which
    # break a log line or a CSV row as a newline does (an HTTP audit)
    return not any((unicodedata.category(ch).startswith("C") and ch not in _JOINERS)
                   or ch in _LINE_BREAKS for ch in value)


#: the characters of categories Zl and Zp
_LINE_BREAKS = {"\u2028", "\u2029"}


#: the ASCII characters of categories Z and C: space, the C0 controls, DEL
_INVISIBLE_ASCII = "".join(map(chr, range(0x21))) + "\x7f"

#: letters that draw nothing (the Hangul fillers, the blank Braille pattern)
_BLANK_LETTERS = {"\u115f", "\u1160", "\u3164", "\uffa0", "\u2800"}


def has_something_to_see(value: str) -> bool:
    """At least one character that draws: not a space, a format character (the joiners
    are allowed only between others), a lone combining mark or a blank letter."""
    if value.isascii():  # in ASCII only the space and the controls draw nothing
        return bool(value.strip(_INVISIBLE_ASCII))
    return any(not unicodedata.category(ch).startswith(("Z", "C", "M"))
               and ch not in _BLANK_LETTERS for ch in value)


def text(body: dict[str, Any], name: str, max_length: int) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise InvalidRequest(f"{name} must be a non-empty string")
    if not value.strip():  # "   " or U+3000 was called empty (an API audit)
        raise InvalidRequest(f"{name} must not be blank (spaces only)")
    if len(value) > max_length:
        raise InvalidRequest(f"{name} must be at most {max_length} characters")
    if not is_clean_text(value):
        raise InvalidRequest(f"{name} contains characters that are not allowed")
    if not has_something_to_see(value):  # said apart: a lone mark is allowed in a name
        raise InvalidRequest(f"{name} must have a visible character (not only spaces, "
                             "marks or format characters)")
    return value


def integer(body: dict[str, Any], name: str, *, low: int, high: int,
            default: int | None = None) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"{name} must be an integer")
    if not low <= value <= high:
        raise InvalidRequest(f"{name} must be between {low} and {high}")
    return value


def idempotency_key(request: Request) -> str | None:
    # the WSGI variable itself: ``request.headers`` builds a view of the environ first
    # (the purchase path's cost: docs/performance.md, session 9)
    key = request.environ.get("HTTP_IDEMPOTENCY_KEY")
    if key is None:
        return None
    try:  # WSGI hands headers over as latin-1; clients send UTF-8
        key = key.encode("latin-1").decode("utf-8")
    except UnicodeError:
        # read as latin-1 instead, b"caf\xe9" would be the key b"caf\xc3\xa9" (both
        # "café"): one buyer's retry answered with another request's order
        raise InvalidRequest("Idempotency-Key must be UTF-8 text") from None
    if not key.strip() or len(key) > MAX_KEY_LENGTH or not is_clean_text(key):
        raise InvalidRequest(f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} printable characters")
    if "," in key:  # the server joins a header sent twice with commas: which one was meant?
        raise InvalidRequest("send one Idempotency-Key, without commas")
    return key


def plausible_sku(sku: str) -> bool:
    """Skus longer than the column or with odd characters cannot exist: 404 early.

    Nor can skus of dots only: ``.`` and ``..`` are path segments, which a browser
    resolves before sending (``/api/products/../purchase`` went to ``/api/purchase``),
    so products ``.`` and ``..`` were made and listed, and no page could buy them or
    audit them (a browser audit). ``...`` would reach the shop, and goes with them:
    one rule, easy to say. Nor can a sku with a ``/``: sent as ``%2F``, the server
    decodes it before routing, and no route matches."""
    return (0 < len(sku) <= 64 and sku.strip(".") != "" and "/" not in sku
            and is_clean_text(sku))
