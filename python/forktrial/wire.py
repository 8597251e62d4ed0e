"""The client's side of forktrial's wire protocol (docs/wire-protocol.md),
spoken directly over ZeroMQ with Debian's python3-zmq: the envelopes a
client sends to read and cancel jobs and list workers, and the answers it
reads. A minimal Cap'n Proto codec for those messages alone, written from
the encoding's specification and the layouts schema/wire.capnp compiles to
(`capnp compile -ocapnp schema/wire.capnp` prints them).

Every byte from the coordinator is bounds-checked: a malformed answer is a
``WireError``, never an IndexError deep in a caller."""

from __future__ import annotations

import itertools
import os
import re
import struct
from dataclasses import dataclass
from typing import Optional

PROTOCOL_VERSION = 3

# Envelope (16 data bytes, 1 pointer): version u32 at byte 0, the union's
# tag u16 at byte 4, requestId u64 at byte 8; the arm's struct at ptr[0].
ARM = {
    "error": 0,
    "clientHello": 12,
    "statusRequest": 16,
    "cancelJob": 17,
    "resultsRequest": 18,
    "workersRequest": 19,
    "jobStatus": 22,
    "results": 23,
    "workers": 24,
    "ok": 25,
}
ARM_NAME = {tag: name for name, tag in ARM.items()}

# ErrorCode, in base/error.h's order.
ERROR_CODES = (
    "not_found",
    "invalid_argument",
    "failed_precondition",
    "conflict",
    "resource_exhausted",
    "unavailable",
    "cancelled",
    "internal",
)

MAX_FRAME_BYTES = 256 << 20
_WORD = 8


class WireError(ValueError):
    """A frame that is not a message of this protocol."""


# ---- Building: one segment, words appended in order.


class _Builder:
    def __init__(self) -> None:
        self.words = bytearray(_WORD)  # word 0: the root pointer

    def allocate(self, words: int) -> int:
        at = len(self.words) // _WORD
        self.words += bytes(words * _WORD)
        return at

    def struct_pointer(self, at: int, target: int, data: int, pointers: int) -> None:
        offset = target - at - 1
        value = ((offset & 0x3FFFFFFF) << 2) | (data << 32) | (pointers << 48)
        struct.pack_into("<Q", self.words, at * _WORD, value)

    def text(self, at: int, text: str) -> None:
        raw = text.encode("utf-8") + b"\0"
        target = self.allocate((len(raw) + _WORD - 1) // _WORD)
        self.words[target * _WORD:target * _WORD + len(raw)] = raw
        offset = target - at - 1
        value = 1 | ((offset & 0x3FFFFFFF) << 2) | (2 << 32) | (len(raw) << 35)
        struct.pack_into("<Q", self.words, at * _WORD, value)

    def frame(self) -> bytes:
        return struct.pack("<II", 0, len(self.words) // _WORD) + bytes(self.words)


def encode(arm: str, request_id: int, *, job: Optional[str] = None, after: int = 0,
           limit: int = 0, hold_millis: int = 0) -> bytes:
    """The frame of an envelope with `arm`: a Void arm (clientHello,
    workersRequest), a JobQuery (statusRequest, cancelJob: `job`, and for a
    status `hold_millis`, how long the coordinator may hold it until the job
    finishes) or a ResultsRequest (`job`, `after`, `limit`)."""

    b = _Builder()
    envelope = b.allocate(2 + 1)
    b.struct_pointer(0, envelope, 2, 1)
    base = envelope * _WORD
    struct.pack_into("<I", b.words, base, PROTOCOL_VERSION)
    struct.pack_into("<H", b.words, base + 4, ARM[arm])
    struct.pack_into("<Q", b.words, base + 8, request_id)
    pointer = envelope + 2
    if arm in ("statusRequest", "cancelJob"):
        query = b.allocate(2)
        b.struct_pointer(pointer, query, 1, 1)
        struct.pack_into("<I", b.words, query * _WORD, hold_millis)
        b.text(query + 1, job or "")
    elif arm == "resultsRequest":
        request = b.allocate(2)
        b.struct_pointer(pointer, request, 1, 1)
        struct.pack_into("<II", b.words, request * _WORD, after, limit)
        b.text(request + 1, job or "")
    elif arm not in ("clientHello", "workersRequest"):
        raise ValueError(f"this client does not send {arm}")
    return b.frame()


# ---- Reading.


@dataclass
class _Struct:
    segment: int
    data: int      # word offset of the data section
    data_words: int
    pointers: int  # word offset of the pointer section
    pointer_count: int


class _Reader:
    def __init__(self, frame: bytes) -> None:
        if len(frame) % _WORD or len(frame) < _WORD or len(frame) > MAX_FRAME_BYTES:
            raise WireError("the frame is not whole 8-byte words")
        count = struct.unpack_from("<I", frame, 0)[0] + 1
        if count > 512:
            raise WireError(f"the frame claims {count} segments")
        table = 4 + 4 * count
        table += (-table) % _WORD
        if table > len(frame):
            raise WireError("the frame ends inside its segment table")
        self.segments = []
        start = table
        for i in range(count):
            words = struct.unpack_from("<I", frame, 4 + 4 * i)[0]
            end = start + words * _WORD
            if end > len(frame):
                raise WireError("a segment runs past the frame")
            self.segments.append(memoryview(frame)[start:end])
            start = end
        self.budget = len(frame) // _WORD * 4  # bounds the words read (amplification)

    def word(self, segment: int, at: int) -> int:
        data = self.segments[segment]
        if at < 0 or (at + 1) * _WORD > len(data):
            raise WireError("a pointer leads out of its segment")
        self.budget -= 1
        if self.budget < 0:
            raise WireError("the message reads more words than it holds")
        return struct.unpack_from("<Q", data, at * _WORD)[0]

    def _resolve(self, segment: int, at: int):
        """The (segment, pointer value, target word) of the pointer at `at`,
        following far pointers."""

        value = self.word(segment, at)
        if value & 3 != 2:
            offset = _signed30(value >> 2)
            return segment, value, at + 1 + offset
        far_segment = value >> 32
        pad = (value >> 3) & 0x1FFFFFFF
        if far_segment >= len(self.segments):
            raise WireError("a far pointer names a segment that is not there")
        if not value & 4:
            landing = self.word(far_segment, pad)
            if landing & 3 == 2:
                raise WireError("a far pointer lands on another")
            return far_segment, landing, pad + 1 + _signed30(landing >> 2)
        content = self.word(far_segment, pad)
        tag = self.word(far_segment, pad + 1)
        target_segment = content >> 32
        if content & 7 != 2 or target_segment >= len(self.segments):
            raise WireError("a double-far pointer is malformed")
        return target_segment, tag, (content >> 3) & 0x1FFFFFFF

    def struct_at(self, segment: int, at: int) -> Optional[_Struct]:
        seg, value, target = self._resolve(segment, at)
        if value == 0:
            return None
        if value & 3 != 0:
            raise WireError("a struct pointer is not one")
        data = (value >> 32) & 0xFFFF
        pointers = value >> 48
        if target < 0 or (target + data + pointers) * _WORD > len(self.segments[seg]):
            raise WireError("a struct runs past its segment")
        return _Struct(seg, target, data, target + data, pointers)

    def root(self) -> _Struct:
        found = self.struct_at(0, 0)
        if found is None:
            raise WireError("the message has no root")
        return found

    def u(self, s: _Struct, byte: int, size: int) -> int:
        if byte + size > s.data_words * _WORD:
            return 0  # a field past a shorter struct reads as its default
        data = self.segments[s.segment]
        return int.from_bytes(data[s.data * _WORD + byte:s.data * _WORD + byte + size], "little")

    def pointer(self, s: _Struct, index: int) -> Optional[int]:
        return s.pointers + index if index < s.pointer_count else None

    def text(self, s: _Struct, index: int) -> str:
        at = self.pointer(s, index)
        return "" if at is None else self._text_at(s.segment, at)

    def _text_at(self, segment: int, at: int) -> str:
        seg, value, target = self._resolve(segment, at)
        if value == 0:
            return ""
        if value & 3 != 1 or (value >> 32) & 7 != 2:
            raise WireError("a text pointer is not a list of bytes")
        count = value >> 35
        data = self.segments[seg]
        if count == 0 or target < 0 or target * _WORD + count > len(data):
            raise WireError("a text runs past its segment")
        self.budget -= count // _WORD
        raw = bytes(data[target * _WORD:target * _WORD + count])
        if raw[-1] != 0:
            raise WireError("a text does not end with NUL")
        try:
            return raw[:-1].decode("utf-8")
        except UnicodeDecodeError as error:
            raise WireError(f"a text is not UTF-8: {error}") from error

    def texts(self, s: _Struct, index: int) -> list[str]:
        at = self.pointer(s, index)
        if at is None:
            return []
        seg, value, target = self._resolve(s.segment, at)
        if value == 0:
            return []
        if value & 3 != 1 or (value >> 32) & 7 != 6:
            raise WireError("a list of texts is not a list of pointers")
        count = value >> 35
        if target < 0 or (target + count) * _WORD > len(self.segments[seg]):
            raise WireError("a list runs past its segment")
        return [self._text_at(seg, target + i) for i in range(count)]


def _signed30(bits: int) -> int:
    bits &= 0x3FFFFFFF
    return bits - (1 << 30) if bits & (1 << 29) else bits


@dataclass
class Answer:
    """A decoded envelope: its arm and what this client reads of it."""

    arm: str
    request_id: int
    text: str = ""            # jobStatus and workers: the JSON; error: the message
    code: str = ""            # error: its category
    lines: tuple = ()         # results
    next: int = 0
    total: int = 0


def decode(frame: bytes) -> Answer:
    reader = _Reader(frame)
    envelope = reader.root()
    version = reader.u(envelope, 0, 4)
    if version != PROTOCOL_VERSION:
        raise WireError(f"the coordinator speaks protocol {version}; this client speaks "
                        f"{PROTOCOL_VERSION}")
    tag = reader.u(envelope, 4, 2)
    request_id = reader.u(envelope, 8, 8)
    arm = ARM_NAME.get(tag)
    if arm is None:
        raise WireError(f"an answer of arm {tag}, which this client does not read")
    if arm not in ("error", "jobStatus", "results", "workers", "ok"):
        raise WireError(f"a {arm} message, which a client is never sent")
    answer = Answer(arm, request_id)
    if arm == "ok":
        return answer
    body = reader.struct_at(envelope.segment, envelope.pointers)
    if body is None:
        raise WireError(f"the {arm} answer is empty")
    if arm == "error":
        code = reader.u(body, 0, 2)
        answer.code = ERROR_CODES[code] if code < len(ERROR_CODES) else "internal"
        answer.text = reader.text(body, 0)
    elif arm in ("jobStatus", "workers"):
        answer.text = reader.text(body, 0)
    elif arm == "results":
        answer.lines = tuple(reader.texts(body, 0))
        answer.next = reader.u(body, 0, 4)
        answer.total = reader.u(body, 4, 4)
    return answer


# ---- Keys (forktrial keygen's files).

_Z85_KEY = re.compile(r"^[0-9a-zA-Z.\-:+=^!/*?&<>()\[\]{}@%$#]{40}$")


def _quoted(line: str, name: str) -> Optional[str]:
    match = re.match(r'^\s*' + re.escape(name) + r'\s*=\s*"([^"]*)"', line)
    return match.group(1) if match else None


def read_keypair(path: str | os.PathLike[str]) -> tuple[str, str]:
    """(public, secret) Z85 keys of a keypair file."""
    public = secret = None
    with open(path, encoding="utf-8") as file:
        for line in file:
            public = _quoted(line, "public-key") or public
            secret = _quoted(line, "secret-key") or secret
    if not secret or not public:
        raise ValueError(f"{path} holds no public-key and secret-key: give a keypair file from "
                         "forktrial keygen, not a .pub file")
    return public, secret


def read_public_key(key_or_path: str | os.PathLike[str]) -> str:
    """A Z85 public key given itself or as its .pub (or keypair) file."""
    text = str(key_or_path)
    if _Z85_KEY.match(text):
        return text
    with open(key_or_path, encoding="utf-8") as file:
        for line in file:
            value = _quoted(line, "public-key")
            if value and _Z85_KEY.match(value):
                return value
    raise ValueError(f"{key_or_path} holds no public-key line")


_request_ids = itertools.count(1)


def next_request_id() -> int:
    return next(_request_ids)
