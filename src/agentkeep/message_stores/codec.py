"""The compact record format every durable backend stores messages in.

A stored message is three parts, so backends can keep the id and time in their own columns:

* **id** (:func:`encode_id`): agentkeep's 32-hex-digit ids as 16 raw bytes; any other id as
  ``0x00`` + UTF-8 (padded with one more ``0x00`` if that would also be 16 bytes long). Ids may
  not contain NUL characters.
* **time** (:func:`encode_time`): microseconds since the Unix epoch, UTC (the instant is kept;
  a non-UTC offset is read back as UTC).
* **body** (:func:`encode_body`): the message without its id and time. A message that is one
  plain text (the common case) is ``0x01``, a role byte and the UTF-8 text; with an author name,
  ``0x03``, role, name length, name, text. A text of 1 KiB or more is stored deflated (raw
  DEFLATE, kinds ``0x04`` / ``0x05``) when that saves at least 8 bytes: ordinary prose shrinks by
  about 30% (a document, a long tool result). Chat-sized texts stay plain: inflating a record costs
  about 2 us however short it is, more than decoding everything else of it, so a history of short
  messages loads faster stored plain (records deflated by earlier versions, from 96 bytes up, are
  read as before). Anything else is ``0x02`` and the wire form as MessagePack (lossless, unknown
  fields included).

**Seal** (format 2, :func:`seal`): every record a durable backend writes carries a CRC-32 over
the conversation id, the encoded id, the time and the body, appended to the body (4 bytes), and its
kind byte has the high nibble ``0xF`` (``0xF1``-``0xF5``: four bits from any unsealed kind). A
flipped bit or a truncated record anywhere in id, time or body, or a record moved to another
conversation, fails :func:`unseal`. Records of format 1 (no seal) stay readable; what cannot be
told apart from corruption is a damaged kind byte that happens to become an unsealed kind while the
rest still decodes. Summaries' lists of replaced ids and the backends' bookkeeping (sequence
numbers, exclusion flags) are not covered.

**Encryption** (when a backend is given a :class:`~agentkeep.encryption.KeyRing`): the body is
replaced by kind ``0x06``, the key id's length and the key id, then the AES-256-GCM nonce,
ciphertext and tag of the plain body (see :mod:`agentkeep.encryption`: a synthetic nonce, and
associated data binding it to the conversation, the message id and the key id); the record is
then sealed like any other (kind ``0xF6``). Ids, times, sizes and the backends' bookkeeping stay
in the clear; the time is covered by the seal's CRC only (a retry may stamp messages anew and must
still produce the bytes first stored, so it is not associated data). Plain and encrypted records
mix freely in one conversation; :func:`reseal` moves a record to the ring's current key.

Decoding errors raise ``ValueError`` / ``msgspec`` errors (:data:`DECODE_ERRORS` lists what a damaged
record can raise); backends turn them into
:class:`~agentkeep.errors.CorruptRecordError` naming the conversation and sequence number.
"""

from __future__ import annotations

import gc
import struct
import zlib
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from itertools import repeat
from operator import itemgetter, methodcaller
from typing import TYPE_CHECKING, Any, Final

import msgspec

from ..contents import TextContent
from ..encryption import NONCE_SIZE, TAG_SIZE, KeyMismatch, decryption_error
from ..errors import CorruptRecordError, MessageFormatError
from ..messages import FLOAT_EXACT_MICROS, Message, Role, time_of_micros

if TYPE_CHECKING:
    from ..encryption import EncryptionKey, KeyRing

__all__ = [
    "BATCH",
    "DECODE_ERRORS",
    "FORMAT_VERSION",
    "RecordKey",
    "bulk_decoding",
    "decode_batch",
    "decode_body",
    "decode_id",
    "decode_message",
    "decode_rows",
    "decode_time",
    "encode_body",
    "encode_id",
    "encode_identity",
    "encode_records",
    "encode_time",
    "record_error",
    "record_key_id",
    "reseal",
    "seal",
    "seal_key",
    "unseal",
]

FORMAT_VERSION: Final = 2
"""Version of this record format; backends store it and refuse data from newer versions (2: sealed
records, see the module docs)."""

DECODE_ERRORS: Final = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    IndexError,
    OverflowError,
    msgspec.MsgspecError,
)
"""What decoding a damaged record can raise; backends turn these into ``CorruptRecordError``."""

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_TIME: Final = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
_MAX_TIME: Final = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(microseconds=1)
"""The range of times :func:`decode_time` can return, as :func:`encode_time` values."""
_ROLES: Final[tuple[Role, ...]] = ("system", "user", "assistant", "tool")
_ROLE_CODES: Final[dict[str, int]] = {role: code for code, role in enumerate(_ROLES)}
_PLAIN, _WIRE, _AUTHORED, _PLAIN_Z, _AUTHORED_Z, _ENCRYPTED = 1, 2, 3, 4, 5, 6
_SEALED: Final = 0xF0  # the high nibble of a sealed record's kind byte
_CRC_RESIDUE: Final = 0x2144DF1C
_DEFLATE_FROM: Final = 1024  # bytes of text: inflating costs ~2 us a record, more than decoding
# the rest of it; below this a chat message is read faster stored plain than it is made smaller
_DEFLATE_GAIN: Final = 8  # bytes a deflated text must save to be stored deflated
_HEX: Final = frozenset("0123456789abcdef")
_NONCE_AND_TAG: Final = NONCE_SIZE + TAG_SIZE  # the least an encrypted body holds
_NO_PLAIN_RECORD: Final = "an encrypted record holds no plain record"
_crc32: Final = zlib.crc32
_new: Final = object.__new__
_pack_id_time: Final = struct.Struct(">16sq").pack  # a 16-byte id and its time, as the seal reads them
_first, _second = itemgetter(0), itemgetter(1)
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


def encode_id(message_id: str) -> bytes:
    """A message id as bytes (16 for agentkeep's own ids)."""
    if len(message_id) == 32 and _HEX.issuperset(message_id):
        return bytes.fromhex(message_id)
    if "\x00" in message_id:
        raise MessageFormatError("message ids may not contain NUL characters", path="message_id")
    try:
        raw = b"\x00" + message_id.encode()
    except UnicodeEncodeError as exc:
        raise MessageFormatError("message ids must be valid Unicode text", path="message_id") from exc
    return raw + b"\x00" if len(raw) == 16 else raw


def encode_identity(message: Message) -> tuple[bytes, int]:
    """The encoded id and time of ``message``, given them first if it has none."""
    message.ensure_identity()
    message_id, created_at = message.message_id, message.created_at
    if message_id is None or created_at is None:  # pragma: no cover - ensure_identity() set them
        raise AssertionError("ensure_identity() left the message without an id or time")
    return encode_id(message_id), encode_time(created_at)


def decode_id(data: bytes) -> str:
    """The id :func:`encode_id` encoded."""
    if len(data) == 16:
        return data.hex()
    if not data.startswith(b"\x00"):
        raise ValueError("not an encoded message id")
    return data[1:].rstrip(b"\x00").decode()


def encode_time(value: datetime) -> int:
    """Microseconds since the Unix epoch (UTC).

    Raises:
        MessageFormatError: ``value`` has no timezone, or its instant lies outside what a UTC
            ``datetime`` can hold (years 1 to 9999 in UTC, e.g. ``0001-01-01T00:00:00+23:59``):
            it could be written but never read back.
    """
    try:
        delta = value - _EPOCH
    except TypeError as exc:
        raise MessageFormatError("created_at must be a timezone-aware datetime", path="created_at") from exc
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if not _MIN_TIME <= micros <= _MAX_TIME:
        raise MessageFormatError(
            f"created_at {value.isoformat()} is outside the UTC range of a datetime", path="created_at"
        )
    return micros


def decode_time(value: int) -> datetime:
    """The UTC time :func:`encode_time` encoded."""
    return _EPOCH + timedelta(microseconds=value)


def encode_body(message: Message) -> bytes:
    """The message without id and time, compactly (see the module docs).

    Raises:
        MessageFormatError: A value set after the message was made cannot be stored (a lone
            surrogate, a structure that contains itself, an object of no known form).
    """
    try:
        return _encode_body(message)
    except (UnicodeEncodeError, RecursionError, TypeError, OverflowError) as exc:
        what = "a lone surrogate in a text" if isinstance(exc, UnicodeEncodeError) else str(exc)
        raise MessageFormatError(f"the message cannot be stored: {what}") from exc


def _encode_body(message: Message) -> bytes:
    contents = message.contents
    if (
        len(contents) == 1
        and type(contents[0]) is TextContent
        and not contents[0].additional_properties
        and not contents[0].extra_fields
        and not message.additional_properties
        and not message.extra_fields
    ):
        text = contents[0].text.encode()
        deflated = False
        if len(text) >= _DEFLATE_FROM:
            # A 512-byte window covers a message-sized text and makes the compressor ~3x cheaper
            # to set up than the default 32 KiB one, at the same output size.
            deflater = zlib.compressobj(6, zlib.DEFLATED, -9)
            packed = deflater.compress(text) + deflater.flush()
            if len(packed) + _DEFLATE_GAIN <= len(text):
                text, deflated = packed, True
        author = message.author_name
        if author is None:
            return bytes((_PLAIN_Z if deflated else _PLAIN, _ROLE_CODES[message.role])) + text
        name = author.encode()
        if len(name) < 256:
            kind = _AUTHORED_Z if deflated else _AUTHORED
            return bytes((kind, _ROLE_CODES[message.role], len(name))) + name + text
    wire = message.to_dict()
    wire.pop("message_id", None)
    wire.pop("created_at", None)
    return bytes((_WIRE,)) + _encoder.encode(wire)


def decode_body(
    body: bytes, *, message_id: str | None, created_at: datetime | None, end: int | None = None
) -> Message:
    """The message :func:`encode_body` encoded, with its id and time put back; ``body`` may be a
    sealed record's, read up to ``end`` (its seal is checked by :func:`unseal` or
    :func:`decode_message`, not here).

    Raises:
        ValueError: ``body`` is not a valid record (``MessageFormatError`` is a ``ValueError``).
    """
    if not body:
        raise ValueError("empty record")
    kind = body[0]
    if kind >= _SEALED:  # a sealed body (its seal checked by unseal)
        kind &= 0x0F
    if kind in (_PLAIN, _AUTHORED, _PLAIN_Z, _AUTHORED_Z):
        stop = len(body) if end is None else end
        if stop < 2 or stop > len(body):
            raise ValueError("truncated record")
        if body[1] >= len(_ROLES):
            raise ValueError("bad role code")
        author: str | None = None
        start = 2
        if kind in (_AUTHORED, _AUTHORED_Z):
            if stop < 3 or 3 + body[2] > stop:
                raise ValueError("the author name's length runs past the end of the record")
            start = 3 + body[2]
            author = body[3:start].decode()
        raw = body[start:end]
        if kind in (_PLAIN_Z, _AUTHORED_Z):
            try:
                raw = zlib.decompress(raw, -15)
            except zlib.error as exc:
                raise ValueError(f"invalid deflated text: {exc}") from exc
        # strict UTF-8: the text holds no lone surrogate, and the rest was checked before storing
        return Message.from_checked_text(_ROLES[body[1]], raw.decode(), author, message_id, created_at)
    if kind == _WIRE:
        try:
            wire: Any = _decoder.decode(body[1:end])
            message = Message.from_dict(wire, checked=True)  # checked before it was stored and sealed
        except msgspec.DecodeError as exc:
            raise ValueError(f"invalid MessagePack: {exc}") from exc
        except RecursionError as exc:
            # The decoders' depth is bounded by the interpreter's recursion limit, as the encoder's
            # is: nothing this deep was ever stored by encode_body.
            raise ValueError("the record is nested too deeply to be a stored message") from exc
        message.message_id = message_id
        message.created_at = created_at
        return message
    raise ValueError(f"unknown record kind {kind}")


@contextmanager
def bulk_decoding() -> Generator[None]:
    """The cyclic garbage collector paused while a load decodes its messages: each message makes a
    few container objects, so a long load would otherwise run the collector every few hundred
    messages and, past the first tens of thousands, walk every object the process holds, again and
    again (messages hold no reference cycles; whatever else becomes garbage meanwhile is collected
    as usual afterwards). A no-op when the collector is already off."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def encode_records(
    conversation_id: str, messages: Sequence[Message], *, key_ring: KeyRing | None = None
) -> list[tuple[bytes, int, bytes]]:
    """What a durable backend stores for ``messages`` of ``conversation_id``: each one's encoded
    id, time and sealed body (encrypted with the ring's current key when ``key_ring`` is given).
    Every body is encoded before any message is given an id or a time, so a message that cannot be
    stored leaves the batch untouched.

    Raises:
        MessageFormatError: A message cannot be stored (see :func:`encode_body`, :func:`encode_time`).
    """
    bodies = [encode_body(message) for message in messages]
    key = seal_key(conversation_id, key_ring)
    records: list[tuple[bytes, int, bytes]] = []
    for message, body in zip(messages, bodies, strict=True):
        message_id, created_at = encode_identity(message)
        records.append((message_id, created_at, seal(key, message_id, created_at, body)))
    return records


class RecordKey:
    """What seals (and encrypts) records of one conversation: made by :func:`seal_key` once per
    operation.

    Attributes:
        conversation_id: The conversation.
        crc: The CRC-32 of the conversation id, where every seal starts.
        associated: The conversation id as associated data (length-prefixed UTF-8).
        key_ring: The ring records are encrypted with and decrypted by, if any.
    """

    __slots__ = (
        "associated",
        "associated_16",
        "conversation_id",
        "crc",
        "found",
        "key_ring",
        "last_key",
        "last_kid",
    )

    def __init__(self, conversation_id: str, key_ring: KeyRing | None = None) -> None:
        raw = conversation_id.encode("utf-8", "surrogatepass")
        self.conversation_id = conversation_id
        self.crc = zlib.crc32(raw + b"\x00")
        self.associated = len(raw).to_bytes(4, "big") + raw
        self.associated_16 = self.associated + (16).to_bytes(2, "big")
        """The associated data of an encrypted record up to its 16-byte message id."""
        self.key_ring = key_ring
        self.found: dict[bytes, EncryptionKey | None] = {}
        """The ring's key of each key id met in this operation's records (looked up once)."""
        self.last_kid: bytes | None = None
        self.last_key: EncryptionKey | None = None
        """The key id and key of the last record decrypted: a load's records are nearly always
        under one key, so :func:`decode_message` decrypts those directly with it."""


def seal_key(conversation_id: str, key_ring: KeyRing | None = None) -> RecordKey:
    """What binds seals to ``conversation_id`` (and encrypts with ``key_ring``): computed once per
    operation."""
    return RecordKey(conversation_id, key_ring)


def seal(key: RecordKey, message_id: bytes, created_at: int, body: bytes) -> bytes:
    """``body`` (from :func:`encode_body`) sealed for storage: encrypted if ``key`` has a key ring,
    its kind marked as sealed and a CRC-32 over the conversation, id, time and body appended."""
    if key.key_ring is not None:
        body = _encrypt(key, key.key_ring, message_id, body)
    sealed = bytes((body[0] | _SEALED,)) + body[1:]
    start = zlib.crc32(created_at.to_bytes(8, "big", signed=True), zlib.crc32(message_id, key.crc))
    return sealed + zlib.crc32(sealed, start).to_bytes(4, "little")


def _encrypt(key: RecordKey, ring: KeyRing, message_id: bytes, body: bytes) -> bytes:
    current = ring.current
    kid = current.id_bytes
    associated = _associated(key, message_id, kid)
    return bytes((_ENCRYPTED, len(kid))) + kid + current.encrypt(body, associated, synthetic_nonce=True)


def _associated(key: RecordKey, message_id: bytes, kid: bytes) -> bytes:
    """What an encrypted record is bound to: its conversation, its message id and the key id."""
    return key.associated + len(message_id).to_bytes(2, "big") + message_id + kid


def _decrypt(key: RecordKey, message_id: bytes, record: bytes, end: int) -> bytes:
    """The plain body inside an encrypted record (its seal checked, ending at ``end``)."""
    size = record[1]
    if 2 + size > end:
        raise ValueError("the key id's length runs past the end of the record")
    kid = record[2 : 2 + size]
    try:
        found = key.found[kid]
    except KeyError:
        ring = key.key_ring
        found = key.found[kid] = None if ring is None else ring.get(kid.decode("ascii", "replace"))
    if found is None:
        key_id = kid.decode("ascii", "replace")
        raise KeyMismatch(
            key_id, "the store has no key ring" if key.key_ring is None else "the key ring does not hold it"
        )
    key.last_kid, key.last_key = kid, found
    # _associated(key, message_id, kid), inline: this runs once per encrypted message of a load
    associated = key.associated + len(message_id).to_bytes(2, "big") + message_id + kid
    body = found.decrypt(record[2 + size : end], associated)
    if body is None:
        raise KeyMismatch(
            kid.decode("ascii", "replace"),
            "it does not decrypt with that key (other key material, or changed)",
        )
    if not body or not _PLAIN <= body[0] <= _AUTHORED_Z:
        raise ValueError(_NO_PLAIN_RECORD)
    return body


def record_key_id(record: bytes) -> str | None:
    """The id of the key a stored record is encrypted with, or ``None`` for a plain one."""
    if len(record) < 2 or record[0] != _ENCRYPTED | _SEALED or 2 + record[1] > len(record) - 4:
        return None  # plain, or damaged (then unseal() says so)
    return record[2 : 2 + record[1]].decode("ascii", "replace")


def reseal(key: RecordKey, message_id: bytes, created_at: int, record: bytes) -> bytes | None:
    """``record`` sealed again, encrypted with the current key of ``key``'s ring, or ``None`` if it
    already is (a plain record gets encrypted).

    Raises:
        KeyMismatch: The record is encrypted under a key the ring cannot decrypt it with.
        ValueError: The record is damaged, or ``key`` has no key ring.
    """
    ring = key.key_ring
    if ring is None:
        raise ValueError("re-encrypting a record needs a key ring")
    if record_key_id(record) == ring.current.key_id:
        return None
    body = unseal(key, message_id, created_at, record)
    return seal(key, message_id, created_at, bytes((body[0] & 0x0F,)) + body[1:])


def record_error(
    exc: Exception, *, backend: str, conversation_id: str, seq: int | None
) -> CorruptRecordError:
    """The typed error for a record that failed to decode with ``exc``: a
    :class:`~agentkeep.errors.DecryptionError` for a key problem, else a ``CorruptRecordError``."""
    if isinstance(exc, KeyMismatch):
        return decryption_error(exc, backend=backend, conversation_id=conversation_id, seq=seq)
    return CorruptRecordError(str(exc), backend=backend, conversation_id=conversation_id, seq=seq)


def _sealed_end(key: int, message_id: bytes, created_at: int, record: bytes) -> int | None:
    """Where a sealed record's body ends (its seal checked), or ``None`` for an unsealed one."""
    if not record or record[0] < _SEALED:
        return None  # unsealed (format 1), or a kind decode_body refuses
    if len(record) < 6:
        raise ValueError("truncated record")
    # A CRC-32 over data followed by its own CRC (little-endian) always gives the same residue.
    start = zlib.crc32(created_at.to_bytes(8, "big", signed=True), zlib.crc32(message_id, key))
    if zlib.crc32(record, start) != _CRC_RESIDUE:
        raise ValueError("the record's checksum does not match: it was changed or damaged")
    return len(record) - 4


def unseal(key: RecordKey, message_id: bytes, created_at: int, record: bytes) -> bytes:
    """The body of a record :func:`seal` sealed, its seal checked and decrypted if it is encrypted
    (a record of format 1 as it is); :func:`decode_body` reads either.

    Raises:
        ValueError: The seal does not match: the record, its id or its time was changed, or it
            belongs to another conversation (``KeyMismatch``: it cannot be decrypted).
    """
    end = _sealed_end(key.crc, message_id, created_at, record)
    if end is None:
        return record
    if record[0] == _ENCRYPTED | _SEALED:
        return _decrypt(key, message_id, record, end)
    return record[:end]


def decode_message(body: bytes, message_id: bytes, created_at: int, *, key: RecordKey) -> Message:
    """A message from its three stored parts, its seal checked and decrypted if it is encrypted
    (``key`` from :func:`seal_key`).

    This runs once per message of every load, so the common record (a sealed plain text, with or
    without encryption) is decoded here in one call, without :func:`decode_body`'s checks of what
    the seal or the cipher already vouches for; every other kind goes through :func:`decode_body`.

    Raises:
        KeyMismatch: The record is encrypted under a key ``key``'s ring does not hold, or does not
            decrypt with it (a ``ValueError``: see :func:`record_error`).
    """
    kind = body[0] if body else 0
    end: int | None = None
    if kind >= _SEALED:
        if len(body) < 6:
            raise ValueError("truncated record")
        # one CRC over id, time and record: the seal's three CRCs run on as one stream
        if (
            _crc32(body, _crc32(message_id + created_at.to_bytes(8, "big", signed=True), key.crc))
            != _CRC_RESIDUE
        ):
            raise ValueError("the record's checksum does not match: it was changed or damaged")
        end = len(body) - 4
        kind &= 0x0F
        if kind == _ENCRYPTED:  # authenticated: the plain body inside is whole
            start = 2 + body[1]
            kid = body[2:start]
            last = key.last_key
            if (
                last is not None
                and kid == key.last_kid
                and end - start >= _NONCE_AND_TAG
                and len(message_id) == 16
            ):  # the key of the record before: _decrypt without its lookups and calls
                associated = key.associated_16 + message_id + kid
                try:
                    nonce = body[start : start + NONCE_SIZE]
                    body = last.open_sealed(nonce, body[start + NONCE_SIZE : end], associated)
                except last.invalid_tag:
                    body = _decrypt(key, message_id, body, end)  # raises what it is
            else:
                body = _decrypt(key, message_id, body, end)
            end = len(body)
            kind = body[0] if end else 0
            if not _PLAIN <= kind <= _AUTHORED_Z:
                raise ValueError(_NO_PLAIN_RECORD)
    identity = message_id.hex() if len(message_id) == 16 else decode_id(message_id)
    when = time_of_micros(created_at)
    if kind == _PLAIN and end is not None and body[1] < 4:  # sealed: its length is checked
        # Message.from_checked_text, inline
        part = _new(TextContent)
        part.text, part.additional_properties, part.extra_fields = body[2:end].decode(), None, None
        message = _new(Message)
        message.role, message.contents, message.author_name = _ROLES[body[1]], [part], None
        message.message_id, message.created_at, message.additional_properties = identity, when, {}
        message.extra_fields = None
        message._source = None  # pyright: ignore[reportPrivateUsage] - what Message.from_checked_text sets
        return message
    return decode_body(body, message_id=identity, created_at=when, end=end)


BATCH: Final = 4096
"""Records a load hands :func:`decode_batch` at a time (its working lists stay small)."""


def decode_batch(
    key: RecordKey, ids: Sequence[bytes], times: Sequence[int], bodies: Sequence[bytes]
) -> list[Message] | None:
    """The messages of a run of stored records (their encoded ids, times and sealed bodies), all
    decoded together when every one is of the common shape; ``None`` when any is not, or any
    check fails: the caller then decodes them one by one with :func:`decode_message`, which says
    which record is wrong and why.

    The common shape: an id of agentkeep's (16 bytes), a time between 1970 and 2038, and a sealed
    plain text with no author, every record plain or every one encrypted under one key of
    ``key``'s ring. Each step runs over the whole run at once, in C (``map`` over ``zlib.crc32``,
    slicing, the cipher, ``bytes.decode``, ``datetime.fromtimestamp``), instead of once per
    record in Python; only the objects of each message are made one by one. Every record's seal
    is still checked, and every encrypted one authenticated.
    """
    try:
        return _decoded_batch(key, ids, times, bodies)
    except (*DECODE_ERRORS, struct.error):  # e.g. a driver's other kind of bytes, a time that is
        return None  # no integer: the records one by one tell


def _decoded_batch(
    key: RecordKey, ids: Sequence[bytes], times: Sequence[int], bodies: Sequence[bytes]
) -> list[Message] | None:
    count = len(bodies)
    if (
        not count
        or set(map(len, ids)) != {16}
        or set(map(type, times)) != {int}
        or min(times) < 0
        or max(times) >= FLOAT_EXACT_MICROS
        or min(map(len, bodies)) < 6
    ):
        return None
    kinds = set(map(_first, bodies))
    if len(kinds) != 1:
        return None
    # the seal, as decode_message checks it: one CRC stream over id, time and record
    seals = map(_crc32, bodies, map(_crc32, map(_pack_id_time, ids, times), repeat(key.crc)))
    if list(seals).count(_CRC_RESIDUE) != count:
        return None
    kind = kinds.pop()
    if kind == _ENCRYPTED | _SEALED:
        plain = _opened_batch(key, ids, bodies)
        if plain is None:
            return None
        texts = map(itemgetter(slice(2, None)), plain)
    elif kind == _PLAIN | _SEALED:
        plain = bodies
        texts = map(itemgetter(slice(2, -4)), bodies)
    else:
        return None
    roles = list(map(_second, plain))
    if max(roles) >= len(_ROLES):
        return None
    words = list(map(bytes.decode, texts))  # a UnicodeDecodeError is a ValueError
    messages: list[Message] = []
    keep = messages.append
    names = _ROLES
    # each time stays its checked microseconds (1970 to 2038: always a datetime) until it is read
    for role, text, identity, when in zip(roles, words, map(bytes.hex, ids), times, strict=True):
        # Message.from_checked_text, inline (as in decode_message)
        part = _new(TextContent)
        part.text, part.additional_properties, part.extra_fields = text, None, None
        message = _new(Message)
        message.role, message.contents, message.author_name = names[role], [part], None
        message.message_id, message._created_at, message.additional_properties = identity, when, {}  # pyright: ignore[reportPrivateUsage]
        message.extra_fields = None
        message._source = None  # pyright: ignore[reportPrivateUsage] - what Message.from_checked_text sets
        keep(message)
    return messages


def _opened_batch(key: RecordKey, ids: Sequence[bytes], bodies: Sequence[bytes]) -> list[bytes] | None:
    """The plain body inside each of a run of encrypted records (every one a plain text), all under the
    key of the first; ``None`` if any is under another key, does not decrypt or holds anything
    but a plain text (:func:`decode_message` then tells which and why)."""
    first = bodies[0]
    start = 2 + first[1]
    kid = first[2:start]
    if kid == key.last_kid and key.last_key is not None:
        found = key.last_key
    else:
        ring = key.key_ring
        found = None if ring is None else ring.get(kid.decode("ascii", "replace"))
        if found is None:
            return None
    if min(map(len, bodies)) < start + _NONCE_AND_TAG + 4 or not all(
        map(methodcaller("startswith", first[1:start], 1), bodies)
    ):
        return None
    nonces = map(itemgetter(slice(start, start + NONCE_SIZE)), bodies)
    sealed = map(itemgetter(slice(start + NONCE_SIZE, -4)), bodies)
    associated = map(b"".join, zip(repeat(key.associated_16), ids, repeat(kid)))  # one copy each
    try:
        plain = list(map(found.open_sealed, nonces, sealed, associated))
    except found.invalid_tag:
        return None
    key.last_kid, key.last_key = kid, found
    if min(map(len, plain)) < 2 or set(map(_first, plain)) != {_PLAIN}:
        return None
    return plain


def decode_rows(
    key: RecordKey,
    rows: Sequence[Sequence[Any]],
    *,
    seq_at: int = 0,
    backend: str,
    seqs: Sequence[int] | None = None,
) -> tuple[list[Message], Sequence[int]]:
    """The messages of a load's ``rows`` (``seq``, ``id``, ``time``, ``body`` from column ``seq_at``
    on; with ``seqs``, the rows' seqs known without reading them, ``id``, ``time``, ``body``) and
    their seqs: the hot loop of long loads on the SQL backends, :data:`BATCH` rows at a time
    through :func:`decode_batch`, one row at a time through :func:`decode_message` where a batch
    is not of the common shape.

    Raises:
        CorruptRecordError: A row does not decode (``DecryptionError`` for a key problem), named
            by its seq (see :func:`record_error`).
    """
    messages: list[Message] = []
    found: list[int] = []
    add, at = messages.append, found.append
    seq = 0
    first = seq_at if seqs is not None else seq_at + 1
    parts = itemgetter(first), itemgetter(first + 1), itemgetter(first + 2)
    try:
        with bulk_decoding():
            for start in range(0, len(rows), BATCH):
                chunk = rows[start : start + BATCH]
                ids, times, bodies = (list(map(part, chunk)) for part in parts)
                batch = decode_batch(key, ids, times, bodies)
                if batch is not None:
                    messages.extend(batch)
                    if seqs is None:
                        found.extend(map(itemgetter(seq_at), chunk))
                    continue
                for index, row in enumerate(chunk, start):
                    seq = row[seq_at] if seqs is None else seqs[index]
                    add(decode_message(row[first + 2], row[first], row[first + 1], key=key))
                    at(seq)
    except DECODE_ERRORS as exc:
        raise record_error(exc, backend=backend, conversation_id=key.conversation_id, seq=seq) from exc
    return messages, found if seqs is None else seqs
