"""The client's Cap'n Proto codec (forktrial.wire): what it sends decodes as
the coordinator reads it, and malformed answers are WireErrors."""

from __future__ import annotations

import random
import struct

import pytest

from forktrial import wire


def test_a_request_frame_is_one_segment_of_whole_words():
    frame = wire.encode("resultsRequest", 7, job="job_1", after=3, limit=50)
    assert len(frame) % 8 == 0
    assert struct.unpack_from("<II", frame, 0) == (0, len(frame) // 8 - 1)


def test_a_request_read_back_is_no_answer():
    # The answers themselves are read from a real coordinator in
    # test_client.py (a results page of many segments included).
    for arm in ("clientHello", "workersRequest", "statusRequest", "resultsRequest"):
        with pytest.raises(wire.WireError, match="a client is never sent"):
            wire.decode(wire.encode(arm, 9, job="j"))


def test_malformed_frames_are_wire_errors():
    good = wire.encode("clientHello", 1)
    for bad in (b"", b"\0" * 7, good[:-8], struct.pack("<II", 5000, 1) + b"\0" * 8,
                struct.pack("<II", 0, 1) + struct.pack("<Q", (1000 << 2) | (2 << 32))):
        with pytest.raises(wire.WireError):
            wire.decode(bad)


def _error_answer(text: str) -> bytearray:
    # An error answer has a status query's shape (one data word, one
    # pointer): the code where the hold is, the message where the job is.
    frame = bytearray(wire.encode("statusRequest", 3, job=text))
    struct.pack_into("<H", frame, 20, wire.ARM["error"])
    return frame


def test_a_pointer_before_its_segment_is_a_wire_error():
    frame = _error_answer("fine")
    assert wire.decode(bytes(frame)).text == "fine"
    # The message's text pointer (the body's only pointer, word 5 of the
    # segment) aimed 100 words before the segment's start.
    value = struct.unpack_from("<Q", frame, 8 + 5 * 8)[0]
    value = (value & ~(0x3FFFFFFF << 2)) | (((-100) & 0x3FFFFFFF) << 2)
    struct.pack_into("<Q", frame, 8 + 5 * 8, value)
    with pytest.raises(wire.WireError, match="runs past its segment"):
        wire.decode(bytes(frame))
    # The body's struct pointer (word 3) aimed the same way.
    frame = _error_answer("fine")
    value = struct.unpack_from("<Q", frame, 8 + 3 * 8)[0]
    value = (value & ~(0x3FFFFFFF << 2)) | (((-100) & 0x3FFFFFFF) << 2)
    struct.pack_into("<Q", frame, 8 + 3 * 8, value)
    with pytest.raises(wire.WireError, match="runs past its segment"):
        wire.decode(bytes(frame))


def test_any_damage_to_an_answer_is_an_answer_or_a_wire_error():
    # Seeded, so that a failure is the same on every run: bytes flipped and
    # whole words replaced in a good error answer decode or are WireErrors,
    # never another exception from inside the decoder.
    rng = random.Random(20261206)
    good = _error_answer("a message of the coordinator's")
    for _ in range(20000):
        frame = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(frame))
            if rng.random() < 0.5:
                frame[at] = rng.randrange(256)
            else:
                word = at - at % 8
                frame[word:word + 8] = rng.randbytes(8)
        try:
            wire.decode(bytes(frame))
        except wire.WireError:
            pass


def test_another_protocol_version_is_refused():
    frame = bytearray(wire.encode("clientHello", 1))
    struct.pack_into("<I", frame, 16, 2)  # the envelope's version, after the root pointer
    with pytest.raises(wire.WireError, match="protocol 2"):
        wire.decode(bytes(frame))


def test_keys_are_read_from_keygen_files(tmp_path):
    public = "rq:rM>}U?@Lns47E1%kR.o@n%FcmmsL/@{H8]yf7"
    secret = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6"
    pair = tmp_path / "client.key"
    pair.write_text(f'# forktrial keygen\npublic-key = "{public}"\nsecret-key = "{secret}"\n')
    assert wire.read_keypair(pair) == (public, secret)
    pub = tmp_path / "client.key.pub"
    pub.write_text(f'public-key = "{public}"\n')
    assert wire.read_public_key(pub) == public
    assert wire.read_public_key(public) == public
    with pytest.raises(ValueError):
        wire.read_keypair(pub)
