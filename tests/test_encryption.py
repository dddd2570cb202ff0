"""The key ring (agentkeep.encryption): key text and files, what never shows key material, the
session-payload envelope, and the encrypted record format of the codec."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentkeep import KeyRing, KeyRingError, Message
from agentkeep.encryption import (
    KEYS_FILE_VARIABLE,
    KEYS_VARIABLE,
    KeyMismatch,
    decrypt_payload,
    encrypt_payload,
    payload_key_id,
    reencrypt_payload,
)
from agentkeep.message_stores.codec import (
    decode_message,
    encode_records,
    record_key_id,
    reseal,
    seal,
    seal_key,
)

K1, K2 = KeyRing.generate_key(), KeyRing.generate_key()


def test_a_ring_from_text_has_the_first_key_current() -> None:
    ring = KeyRing.from_text(f"# rotated 2026-12\nk2={K2}\n\n k1 = {K1} \n")
    assert ring.current.key_id == "k2"
    assert ring.key_ids == ("k2", "k1")
    assert KeyRing.from_text(f"k2={K2},k1={K1}").key_ids == ("k2", "k1")
    urlsafe = base64.urlsafe_b64encode(base64.b64decode(K1)).decode()
    assert KeyRing.from_text(f"k={urlsafe}").current.key_id == "k"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "no keys"),
        ("# only a comment", "no keys"),
        ("k1", "entry 1"),
        (f"bad id!={K1}", "entry 1"),
        (f"k1={K1},k1={K2}", "listed twice"),
        ("k1=not base64!", "not valid base64"),
        (f"k1={base64.b64encode(b'short').decode()}", "5 bytes"),
    ],
    ids=["empty", "comment", "no-key", "bad-id", "twice", "not-base64", "short"],  # keys are random
)
def test_bad_key_text_names_the_problem_never_the_key(text: str, problem: str) -> None:
    with pytest.raises(KeyRingError, match=problem) as caught:
        KeyRing.from_text(text, source="test keys")
    assert "test keys" in str(caught.value)
    assert K1 not in str(caught.value)
    assert K2 not in str(caught.value)


def test_key_material_is_never_shown() -> None:
    ring = KeyRing({"k1": K1, "k0": K2}, current="k0")
    assert ring.current.key_id == "k0"
    for text in (repr(ring), str(ring), repr(ring.current), repr(list(ring))):
        assert K1 not in text
        assert K2 not in text
    with pytest.raises(KeyRingError, match="not in the key ring"):
        KeyRing({"k1": K1}, current="k9")
    with pytest.raises(KeyRingError, match="at least one"):
        KeyRing({})


def test_rings_come_from_the_environment_or_a_private_file(tmp_path: Path) -> None:
    assert KeyRing.from_env({}) is None
    assert KeyRing.from_env({KEYS_VARIABLE: f"k1={K1}"}).key_ids == ("k1",)  # type: ignore[union-attr]
    path = tmp_path / "keys"
    path.write_text(f"k2={K2}\nk1={K1}\n")
    path.chmod(0o600)
    ring = KeyRing.from_env({KEYS_FILE_VARIABLE: str(path)})
    assert ring is not None
    assert ring.key_ids == ("k2", "k1")
    path.chmod(0o644)
    with pytest.raises(KeyRingError, match="can be read by others"):
        KeyRing.from_file(path)
    path.chmod(0o600)
    link = tmp_path / "link"
    link.symlink_to(path)
    with pytest.raises(KeyRingError, match="cannot be opened"):
        KeyRing.from_file(link)  # a planted link is not followed
    os.mkfifo(tmp_path / "fifo", 0o600)
    with pytest.raises(KeyRingError, match="not a regular file"):
        KeyRing.from_file(tmp_path / "fifo")  # opened without blocking, then refused


def test_a_key_file_that_is_not_text_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_bytes(b"k1=\xff\xfe")
    path.chmod(0o600)
    with pytest.raises(KeyRingError, match="not UTF-8"):
        KeyRing.from_file(path)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200) | st.sampled_from([f"k1={K1}", f"k1={K1}\nk1={K1}", "=", "k=="]))
def test_any_key_text_gives_a_ring_or_a_key_ring_error(text: str) -> None:
    problem: KeyRingError | None = None
    try:
        ring = KeyRing.from_text(text)
    except KeyRingError as exc:
        problem = exc
    else:
        assert ring.key_ids
    assert problem is None or K1 not in str(problem)


# -- session payloads ---------------------------------------------------------------------------


def test_session_payloads_are_bound_to_agent_conversation_and_version() -> None:
    ring = KeyRing({"k1": K1})
    payload = b'{"type":"session","version":1,"session_id":"s","state":{"secret":"7319"}}'
    sealed = encrypt_payload(ring, payload, agent="a", conversation_id="c", version=3)
    assert b"7319" not in sealed
    assert payload_key_id(sealed) == "k1"
    assert msgspec.json.decode(sealed)["key"] == "k1"  # the envelope is JSON: text columns hold it
    assert decrypt_payload(ring, sealed, agent="a", conversation_id="c", version=3) == (payload, "k1")
    assert encrypt_payload(ring, payload, agent="a", conversation_id="c", version=3) != sealed  # fresh nonce
    for where in ({"agent": "b"}, {"conversation_id": "d"}, {"version": 2}):
        bound = {"agent": "a", "conversation_id": "c", "version": 3} | where
        with pytest.raises(KeyMismatch, match="does not decrypt"):
            decrypt_payload(ring, sealed, **bound)  # type: ignore[arg-type]
    assert decrypt_payload(ring, payload, agent="a", conversation_id="c", version=3) is None  # plaintext
    with pytest.raises(KeyMismatch, match="does not hold"):
        decrypt_payload(KeyRing({"k2": K2}), sealed, agent="a", conversation_id="c", version=3)
    with pytest.raises(KeyMismatch, match="no key ring"):
        decrypt_payload(None, sealed, agent="a", conversation_id="c", version=3)
    with pytest.raises(ValueError, match="damaged"):
        decrypt_payload(ring, sealed[:-10], agent="a", conversation_id="c", version=3)


def test_payloads_are_reencrypted_to_the_current_key() -> None:
    old, rotated = KeyRing({"k1": K1}), KeyRing({"k2": K2, "k1": K1})
    payload = b'{"type":"session"}'
    sealed = encrypt_payload(old, payload, agent="a", conversation_id="c", version=1)
    moved = reencrypt_payload(rotated, sealed, agent="a", conversation_id="c", version=1)
    assert moved is not None
    assert payload_key_id(moved) == "k2"
    assert reencrypt_payload(rotated, moved, agent="a", conversation_id="c", version=1) is None
    first = reencrypt_payload(rotated, payload, agent="a", conversation_id="c", version=1)  # plaintext
    assert first is not None
    assert decrypt_payload(KeyRing({"k2": K2}), first, agent="a", conversation_id="c", version=1) == (
        payload,
        "k2",
    )


# -- records --------------------------------------------------------------------------------------


def test_encrypted_records_round_trip_and_hide_their_text() -> None:
    ring = KeyRing({"k1": K1})
    messages = [
        Message("user", ["100 EUR to Alice"]),
        Message("assistant", ["done " * 40], author_name="bot"),
    ]
    records = encode_records("c", messages, key_ring=ring)
    key = seal_key("c", ring)
    for (message_id, created_at, body), message in zip(records, messages, strict=True):
        assert record_key_id(body) == "k1"
        for plain in (b"EUR", b"bot", b"done"):
            assert plain not in body
        back = decode_message(body, message_id, created_at, key=key)
        assert (back.text, back.author_name, back.message_id) == (
            message.text,
            message.author_name,
            message.message_id,
        )


def test_a_retry_encrypts_to_the_same_bytes_but_other_records_never_share_a_nonce() -> None:
    ring = KeyRing({"k1": K1})
    first = Message("user", ["same text"])
    [(_, _, stored)] = encode_records("c", [first], key_ring=ring)
    retry = Message("user", ["same text"], message_id=first.message_id)  # stamped anew
    [(_, _, again)] = encode_records("c", [retry], key_ring=ring)
    assert again[:-4] == stored[:-4]  # what a backend compares to recognise the retry
    other = encode_records("c", [Message("user", ["same text"]) for _ in range(50)], key_ring=ring)
    nonces = {body[4:16] for _, _, body in other}  # kind, id length, "k1", then the nonce
    assert len(nonces) == 50


def test_a_record_moved_to_another_conversation_or_message_does_not_decrypt() -> None:
    ring = KeyRing({"k1": K1})
    [(message_id, created_at, body), (other_id, _, _)] = encode_records(
        "c", [Message("user", ["x"]), Message("user", ["y"])], key_ring=ring
    )
    with pytest.raises(ValueError, match="checksum"):
        decode_message(body, message_id, created_at, key=seal_key("d", ring))
    with pytest.raises(ValueError, match="checksum"):
        decode_message(body, other_id, created_at, key=seal_key("c", ring))


def test_every_record_of_a_load_is_authenticated_under_its_own_key() -> None:
    """A load decrypts a record under the key of the record before it without looking that key up
    again: what each record is bound to, and a mixture of keys, still hold record by record."""
    ring = KeyRing({"k1": K1, "k2": K2})
    first = encode_records("c", [Message("user", [f"m{i}"]) for i in range(3)], key_ring=ring)
    [(k2_id, k2_time, k2_body)] = encode_records(
        "c", [Message("user", ["under k2"])], key_ring=KeyRing({"k2": K2, "k1": K1})
    )
    key = seal_key("c", ring)
    records = [first[0], (k2_id, k2_time, k2_body), first[1], first[2]]
    texts = [
        decode_message(body, message_id, created_at, key=key).text for message_id, created_at, body in records
    ]
    assert texts == ["m0", "under k2", "m1", "m2"]
    # one record's ciphertext over another's id, or one bit of it changed, its seal made to match
    (message_id, created_at, body), (other_id, other_time, _) = first[2], first[1]
    inner = bytes((body[0] & 0x0F,)) + body[1:-4]
    changed = bytearray(inner)
    changed[-1] ^= 1
    unsealed = seal_key("c")  # seals without encrypting: the ciphertext is sealed as it is
    for forged, at in (
        (seal(unsealed, other_id, other_time, inner), (other_id, other_time)),
        (seal(unsealed, message_id, created_at, bytes(changed)), (message_id, created_at)),
    ):
        assert decode_message(first[0][2], first[0][0], first[0][1], key=key).text == "m0"
        with pytest.raises(KeyMismatch, match=r"'k1'.*does not decrypt"):
            decode_message(forged, *at, key=key)


def test_reseal_moves_records_to_the_current_key() -> None:
    old, rotated = KeyRing({"k1": K1}), KeyRing({"k2": K2, "k1": K1})
    [(message_id, created_at, plain)] = encode_records("c", [Message("user", ["plain"])])
    [(other_id, other_time, encrypted)] = encode_records("c", [Message("user", ["under k1"])], key_ring=old)
    key = seal_key("c", rotated)
    moved = [reseal(key, message_id, created_at, plain), reseal(key, other_id, other_time, encrypted)]
    assert [record_key_id(body or b"") for body in moved] == ["k2", "k2"]
    assert reseal(key, message_id, created_at, moved[0] or b"") is None
    only_new = seal_key("c", KeyRing({"k2": K2}))
    assert decode_message(moved[1] or b"", other_id, other_time, key=only_new).text == "under k1"
    with pytest.raises(KeyMismatch, match="'k1'"):
        reseal(seal_key("c", KeyRing({"k3": K2})), other_id, other_time, encrypted)
