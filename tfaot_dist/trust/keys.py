"""Signing keys of a channel: ed25519 key pairs in files (PEM), or the private key's text in
$TFAOT_DIST_SIGNING_KEY for CI (a secret is text there; a key never comes from a command line value).

    KEY        the private key (PKCS#8 PEM, mode 0600): signs the channel's TUF metadata
    KEY.pub    the public key (PEM): what another key holder adds to a root
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
)
from securesystemslib.signer import CryptoSigner, SSlibKey

from tfaot_dist.errors import InvalidInput, UsageError
from tfaot_dist.trust.options import KEY_ENV

MAX_KEY = 16 << 10  # a PEM ed25519 key is about 120 bytes


def new_key_pair(path: Path) -> tuple[Path, Path]:
    """Write a new ed25519 key pair to path (private, 0600) and path.pub; refuses to overwrite either.
    Each file appears whole (a temporary sibling, then a hard link that fails if the name is taken)."""
    public = path.with_name(path.name + ".pub")
    for p in (path, public):
        if os.path.lexists(p):
            raise InvalidInput(f"{p}: exists; a key is never overwritten (choose another path)")
    if not path.parent.is_dir():
        raise InvalidInput(f"{path.parent}: no such directory")
    key = Ed25519PrivateKey.generate()
    _write_new(path, CryptoSigner(key).private_bytes, 0o600)
    try:
        _write_new(
            public, key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo), 0o644
        )
    except BaseException:
        os.unlink(path)
        raise
    return path, public


def _write_new(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)  # as asked, whatever the umask
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise InvalidInput(f"{path}: exists; a key is never overwritten (choose another path)") from None
    finally:
        os.unlink(tmp)


def load_signer(path: Path | None) -> CryptoSigner | None:
    """The signer of --sign PATH, else of $TFAOT_DIST_SIGNING_KEY (the key's PEM text), else None.
    A key file others may read is refused, as ssh refuses one."""
    if path is not None:
        try:
            st = os.stat(path)
            if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise InvalidInput(
                    f"--sign: {path}: readable by others (mode {stat.S_IMODE(st.st_mode):04o}); "
                    f"a private key must be mode 0600 (chmod 600 {path})"
                )
            with open(path, "rb") as f:
                data = f.read(MAX_KEY + 1)
        except OSError as exc:
            raise InvalidInput(f"--sign: {path}: unreadable ({exc.strerror})") from None
        return _signer(data, f"--sign: {path}")
    text = os.environ.get(KEY_ENV)
    if text:
        return _signer(text.encode(), f"${KEY_ENV}")
    return None


def _signer(data: bytes, where: str) -> CryptoSigner:
    if len(data) > MAX_KEY:
        raise InvalidInput(f"{where}: not a private key (larger than {MAX_KEY} bytes)")
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError):
        raise InvalidInput(
            f"{where}: not an unencrypted PEM private key (make one with `tfaot-dist keys new PATH`)"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidInput(f"{where}: not an ed25519 key (make one with `tfaot-dist keys new PATH`)")
    return CryptoSigner(key)


def require_signer(path: Path | None, option: str = "--sign") -> CryptoSigner:
    signer = load_signer(path)
    if signer is None:
        raise UsageError(f"give {option} KEY (or set {KEY_ENV} to the key's text)")
    return signer


def load_public(path: Path, option: str = "--key") -> SSlibKey:
    """A public key file (KEY.pub, as `keys new` writes it) as a TUF/DSSE key."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_KEY + 1)
    except OSError as exc:
        raise InvalidInput(f"{option}: {path}: unreadable ({exc.strerror})") from None
    try:
        key = load_pem_public_key(data) if len(data) <= MAX_KEY else None
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, Ed25519PublicKey):
        raise InvalidInput(
            f"{option}: {path}: not an ed25519 public key in PEM (the KEY.pub `tfaot-dist keys new KEY` writes)"
        )
    return SSlibKey.from_crypto(key)
