"""Encryption at rest: a :class:`KeyRing` of AES-256-GCM keys, and the envelope session payloads
are stored in when a store is given one (message records have theirs in
:mod:`agentkeep.message_stores.codec`).

**Keys.** A key is 32 random bytes with an id (``[A-Za-z0-9._-]``, up to 64 characters). The ring's
*current* key encrypts; every key in it decrypts, so older keys stay listed until
``agentkeep keys rotate`` has re-encrypted what they wrote. Two keys are derived from each one with
HKDF-SHA256: the AES-256-GCM key and a nonce key. Key material is never logged: ``repr`` shows ids
only, and errors name the source and the entry, never its text.

**Text form** (``AGENTKEEP_KEYS``, or the file named by ``AGENTKEEP_KEYS_FILE``): entries
``<key id>=<base64 of 32 bytes>`` separated by commas or new lines, the current key first; blank
lines and lines starting with ``#`` are skipped. :meth:`KeyRing.generate_key` makes a key. A key
file must be a regular file that only its owner can read (as for SSH keys); otherwise it is
refused.

**Nonces.** Every record gets its own 96-bit nonce. For a message record it is derived from the
record (keyed BLAKE2b under the nonce key over the associated data and the plaintext: a *synthetic*
nonce), so two different records never share one, and a retried append produces the very bytes
the first attempt stored, which is how a backend recognises the retry without reading the message.
Session payloads get random nonces.

**Associated data** ties each ciphertext to where it is stored: a message record to its
conversation and message id (and the key id), a session payload to its agent, conversation and
version. A record copied to another conversation or over another message, or a session payload
moved to another key or rolled back under a newer version, does not decrypt.

**Errors.** A bad key text or file raises :class:`~agentkeep.errors.KeyRingError`; something
stored under a key the ring does not hold, or that does not decrypt with it, raises
:class:`~agentkeep.errors.DecryptionError` naming the key id. Nothing is ever deleted or rewritten
because it could not be decrypted.

Needs the ``cryptography`` package (``pip install 'agentkeep[encryption]'``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import msgspec

from .errors import DecryptionError, KeyRingError

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "KEYS_FILE_VARIABLE",
    "KEYS_VARIABLE",
    "EncryptionKey",
    "KeyMismatch",
    "KeyRing",
    "decrypt_payload",
    "decryption_error",
    "encrypt_payload",
    "payload_key_id",
    "reencrypt_payload",
]

KEYS_VARIABLE: Final = "AGENTKEEP_KEYS"
"""The environment variable :meth:`KeyRing.from_env` reads keys from (the text form)."""
KEYS_FILE_VARIABLE: Final = "AGENTKEEP_KEYS_FILE"
"""The environment variable naming a key file, when :data:`KEYS_VARIABLE` is not set."""

KEY_SIZE: Final = 32
NONCE_SIZE: Final = 12
TAG_SIZE: Final = 16
_KEY_ID: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SEPARATORS: Final = re.compile(r"[,\n]")


def _aesgcm() -> type[AESGCM]:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError(
            "encryption at rest needs the 'cryptography' package: pip install 'agentkeep[encryption]'"
        ) from exc
    return AESGCM


def _derive(secret: bytes, purpose: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(hashes.SHA256(), KEY_SIZE, salt=None, info=b"agentkeep " + purpose).derive(secret)


class EncryptionKey:
    """One key of a :class:`KeyRing` (its material held only in derived form).

    Args:
        key_id: The key's id, stored with everything it encrypts.
        secret: 32 bytes of key material.

    Raises:
        KeyRingError: The id or the material is not valid.
    """

    __slots__ = ("_aead", "_nonce_key", "id_bytes", "invalid_tag", "key_id", "open_sealed")

    def __init__(self, key_id: str, secret: bytes) -> None:
        if not isinstance(key_id, str) or _KEY_ID.fullmatch(key_id) is None:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise KeyRingError(f"a key id is 1 to 64 of A-Z a-z 0-9 . _ -, not {key_id!r}")
        if not isinstance(secret, bytes) or len(secret) != KEY_SIZE:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise KeyRingError(f"key {key_id!r} must be {KEY_SIZE} bytes of key material")
        self.key_id = key_id
        self.id_bytes = key_id.encode()
        from cryptography.exceptions import InvalidTag

        self._aead = _aesgcm()(_derive(secret, b"aes-256-gcm"))
        self._nonce_key = _derive(secret, b"nonce")
        self.invalid_tag: type[Exception] = InvalidTag
        """What :attr:`open_sealed` raises for something that does not decrypt."""
        self.open_sealed: Callable[[bytes, bytes, bytes], bytes] = self._aead.decrypt
        """The bare AES-GCM decryption :meth:`decrypt` wraps: ``(nonce, ciphertext and tag,
        associated data)`` to the plaintext, raising :attr:`invalid_tag`; for a loop that splits
        what it decrypts itself (a long load: one call per record instead of three)."""

    def __repr__(self) -> str:
        return f"EncryptionKey({self.key_id!r})"

    def encrypt(self, plaintext: bytes, associated: bytes, *, synthetic_nonce: bool = False) -> bytes:
        """The nonce followed by the ciphertext and its 16-byte tag.

        Args:
            plaintext: What to encrypt.
            associated: Data the ciphertext is bound to (not stored in it).
            synthetic_nonce: Derive the nonce from ``associated`` and ``plaintext`` (the same
                input gives the same output) instead of drawing it at random.
        """
        if synthetic_nonce:
            nonce = hashlib.blake2b(
                associated + plaintext, key=self._nonce_key, digest_size=NONCE_SIZE
            ).digest()
        else:
            nonce = os.urandom(NONCE_SIZE)
        return nonce + self._aead.encrypt(nonce, plaintext, associated)

    def decrypt(self, data: bytes, associated: bytes) -> bytes | None:
        """The plaintext of what :meth:`encrypt` returned, or ``None`` if it does not decrypt
        (another key, other associated data, or changed bytes)."""
        if len(data) < NONCE_SIZE + TAG_SIZE:
            return None
        try:
            return self._aead.decrypt(data[:NONCE_SIZE], data[NONCE_SIZE:], associated)
        except self.invalid_tag:
            return None


class KeyRing:
    """The keys a store encrypts with (the current one) and decrypts with (all of them).

    Args:
        keys: Key id to key material (32 bytes, or their base64 text), the current key first
            unless ``current`` names it.
        current: The id of the key new data is encrypted with.

    Raises:
        KeyRingError: No keys, an invalid id or key, or ``current`` not among them.
    """

    __slots__ = ("_keys", "current")

    def __init__(self, keys: Mapping[str, bytes | str], *, current: str | None = None) -> None:
        if not keys:
            raise KeyRingError("a key ring needs at least one key")
        self._keys: dict[str, EncryptionKey] = {}
        for key_id, secret in keys.items():
            material = _decode_key(secret, key_id) if isinstance(secret, str) else secret
            self._keys[key_id] = EncryptionKey(key_id, material)
        current = next(iter(self._keys)) if current is None else current
        if current not in self._keys:
            raise KeyRingError(f"the current key {current!r} is not in the key ring")
        self.current: EncryptionKey = self._keys[current]
        """The key new data is encrypted with."""

    def __repr__(self) -> str:
        return f"KeyRing(current={self.current.key_id!r}, key_ids={self.key_ids!r})"

    @property
    def key_ids(self) -> tuple[str, ...]:
        """The ids of every key in the ring, the current one first."""
        return (self.current.key_id, *(k for k in self._keys if k != self.current.key_id))

    def get(self, key_id: str) -> EncryptionKey | None:
        """The key with ``key_id``, or ``None`` if the ring does not hold it."""
        return self._keys.get(key_id)

    def __iter__(self) -> Iterator[EncryptionKey]:
        return iter(self._keys.values())

    @staticmethod
    def generate_key() -> str:
        """32 fresh random bytes as base64 text, ready for a ``<key id>=<key>`` entry."""
        return base64.b64encode(os.urandom(KEY_SIZE)).decode()

    @classmethod
    def from_text(cls, text: str, *, source: str = "key text") -> KeyRing:
        """A ring from the text form (see the module docs); ``source`` is named in errors.

        Raises:
            KeyRingError: The text holds no key or a malformed entry (named by its number).
        """
        if not isinstance(text, str):  # pyright: ignore[reportUnnecessaryIsInstance] - outside data
            raise KeyRingError(f"{source}: keys must be text")
        keys: dict[str, bytes] = {}
        entries = (entry.strip() for entry in _SEPARATORS.split(text))
        for number, entry in enumerate((e for e in entries if e and not e.startswith("#")), 1):
            key_id, sep, secret = entry.partition("=")
            key_id = key_id.strip()
            if not sep or _KEY_ID.fullmatch(key_id) is None:
                raise KeyRingError(f"{source}: entry {number} is not '<key id>=<base64 key>'")
            if key_id in keys:
                raise KeyRingError(f"{source}: key {key_id!r} is listed twice")
            keys[key_id] = _decode_key(secret.strip(), key_id, source=source)
        if not keys:
            raise KeyRingError(f"{source}: no keys")
        return cls(keys)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> KeyRing:
        """A ring from a key file (the text form), which only its owner may read.

        Raises:
            KeyRingError: The file cannot be read, is readable by others, or is malformed.
        """
        where = Path(path)
        try:
            # No link is followed, and opening a FIFO planted as the key file does not block.
            flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
            fd = os.open(where, flags)
        except OSError as exc:
            raise KeyRingError(f"key file {str(where)!r} cannot be opened: {exc.strerror}") from exc
        with os.fdopen(fd, "rb") as file:
            info = os.fstat(file.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise KeyRingError(f"key file {str(where)!r} is not a regular file")
            if os.name == "posix" and info.st_mode & 0o077:
                raise KeyRingError(
                    f"key file {str(where)!r} can be read by others (mode {stat.S_IMODE(info.st_mode):o}); "
                    "make it readable by its owner only (chmod 600)"
                )
            raw = file.read(1 << 20)
        try:
            text = raw.decode()
        except UnicodeDecodeError as exc:
            raise KeyRingError(f"key file {str(where)!r} is not UTF-8 text") from exc
        return cls.from_text(text, source=f"key file {str(where)!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> KeyRing | None:
        """The ring :data:`KEYS_VARIABLE` (or the file :data:`KEYS_FILE_VARIABLE`) gives, or
        ``None`` if neither is set.

        Raises:
            KeyRingError: The variable or the file is malformed.
        """
        env = os.environ if environ is None else environ
        text = env.get(KEYS_VARIABLE)
        if text:
            return cls.from_text(text, source=f"${KEYS_VARIABLE}")
        path = env.get(KEYS_FILE_VARIABLE)
        return cls.from_file(path) if path else None


def _decode_key(text: str, key_id: str, *, source: str = "key ring") -> bytes:
    try:
        secret = base64.b64decode(text.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise KeyRingError(f"{source}: key {key_id!r} is not valid base64") from exc
    if len(secret) != KEY_SIZE:
        raise KeyRingError(f"{source}: key {key_id!r} is {len(secret)} bytes, not {KEY_SIZE}")
    return secret


class KeyMismatch(ValueError):
    """Something stored cannot be decrypted with the ring at hand; stores report it as
    :class:`~agentkeep.errors.DecryptionError` (see :func:`decryption_error`)."""

    def __init__(self, key_id: str, reason: str) -> None:
        self.key_id = key_id
        self.reason = reason
        super().__init__(f"encrypted with key {key_id!r}, but {reason}")


def decryption_error(
    exc: KeyMismatch, *, backend: str, conversation_id: str, seq: int | None = None
) -> DecryptionError:
    """The typed error for ``exc`` met in ``conversation_id`` (at ``seq``) of ``backend``."""
    return DecryptionError(
        exc.reason, backend=backend, conversation_id=conversation_id, seq=seq, key_id=exc.key_id
    )


# -- session payloads -----------------------------------------------------------------------------

_ENVELOPE: Final = b'{"agentkeep_encrypted":1,"key":"'


def payload_key_id(payload: bytes) -> str | None:
    """The id of the key an encrypted session payload is under, or ``None`` for a plaintext one.

    Raises:
        ValueError: It starts as an envelope but is not one.
    """
    if not payload.startswith(_ENVELOPE):
        return None
    end = payload.find(b'"', len(_ENVELOPE))
    key_id = payload[len(_ENVELOPE) : end].decode("ascii", "replace") if end > 0 else ""
    if _KEY_ID.fullmatch(key_id) is None:
        raise ValueError("a damaged encryption envelope")
    return key_id


def _payload_associated(agent: str, conversation_id: str, version: int, key: EncryptionKey) -> bytes:
    parts = (agent.encode(), conversation_id.encode(), str(version).encode(), key.id_bytes)
    return b"".join(len(part).to_bytes(4, "big") + part for part in parts)


def encrypt_payload(
    ring: KeyRing, payload: bytes, *, agent: str, conversation_id: str, version: int
) -> bytes:
    """A session payload (JSON) in its encrypted envelope, which is JSON too:
    ``{"agentkeep_encrypted":1,"key":"<id>","data":"<base64 of nonce, ciphertext, tag>"}``."""
    key = ring.current
    sealed = key.encrypt(payload, _payload_associated(agent, conversation_id, version, key))
    return _ENVELOPE + key.id_bytes + b'","data":"' + base64.b64encode(sealed) + b'"}'


def decrypt_payload(
    ring: KeyRing | None, payload: bytes, *, agent: str, conversation_id: str, version: int
) -> tuple[bytes, str] | None:
    """The plaintext of an encrypted envelope and its key id; ``None`` for a plaintext payload.

    Raises:
        KeyMismatch: The ring does not hold the key, or it does not decrypt (a ``ValueError``).
        ValueError: The envelope is damaged.
    """
    key_id = payload_key_id(payload)
    if key_id is None:
        return None
    try:
        envelope: Any = msgspec.json.decode(payload)
        sealed = base64.b64decode(envelope["data"], validate=True)
    except (msgspec.DecodeError, KeyError, TypeError, binascii.Error, ValueError) as exc:
        raise ValueError(f"a damaged encryption envelope: {exc}") from exc
    key = None if ring is None else ring.get(key_id)
    if key is None:
        reason = "no key ring was given" if ring is None else "the key ring does not hold it"
        raise KeyMismatch(key_id, reason)
    plaintext = key.decrypt(sealed, _payload_associated(agent, conversation_id, version, key))
    if plaintext is None:
        raise KeyMismatch(key_id, "it does not decrypt with that key (other key material, or changed)")
    return plaintext, key_id


def reencrypt_payload(
    ring: KeyRing, payload: bytes, *, agent: str, conversation_id: str, version: int
) -> bytes | None:
    """``payload`` encrypted with the ring's current key (a plaintext one encrypted for the first
    time), or ``None`` if it already is.

    Raises:
        KeyMismatch: It is encrypted under a key the ring does not hold, or does not decrypt.
        ValueError: Its envelope is damaged.
    """
    if payload_key_id(payload) == ring.current.key_id:
        return None
    opened = decrypt_payload(ring, payload, agent=agent, conversation_id=conversation_id, version=version)
    plaintext = payload if opened is None else opened[0]
    return encrypt_payload(ring, plaintext, agent=agent, conversation_id=conversation_id, version=version)
