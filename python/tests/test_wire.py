"""The client's Cap'n Proto codec (forktrial.wire): what it sends decodes as
the coordinator reads it, and malformed answers are WireErrors."""

from __future__ import annotations

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
