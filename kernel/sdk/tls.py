"""TLS for the KServe frontends: reading and checking the PEM files their flags name, and the
server-side ``ssl.SSLContext`` the HTTP frontend serves with.

Every file is read and checked when the frontend is built, before it binds, so a missing,
unreadable or malformed file (or a key that does not belong to its certificate) stops the
start-up with a message naming the flag and the file, instead of failing the first
handshake. The gRPC frontend takes the checked bytes (``KeyPair``, ``read_certificates``) for
``grpc.ssl_server_credentials``; the HTTP frontend takes ``server_context``. Owns no socket.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from inferd.kernel.sdk.frontends import StartupFailed

__all__ = ["KeyPair", "read_certificates", "read_key_pair", "server_context"]

_CERTIFICATE_MARK = b"-----BEGIN CERTIFICATE-----"
_KEY_MARK = b"PRIVATE KEY-----"


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A server's certificate chain and private key, PEM, checked to belong together."""

    certificate: bytes
    key: bytes


def _read(path: str, flag: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise StartupFailed(f"{flag} {path}: cannot read the file: "
                            f"{error.strerror or error}") from None


def read_certificates(path: str, flag: str) -> bytes:
    """The PEM certificates in ``path``; ``StartupFailed`` naming it if it holds none."""
    data = _read(path, flag)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if _CERTIFICATE_MARK not in data:
            raise ssl.SSLError("no PEM certificate found")
        context.load_verify_locations(cadata=data.decode("ascii", errors="replace"))
    except (ssl.SSLError, ValueError) as error:
        raise StartupFailed(f"{flag} {path}: not a PEM certificate file ({_reason(error)})"
                            ) from None
    return data


def read_key_pair(cert_path: str, cert_flag: str, key_path: str, key_flag: str) -> KeyPair:
    """The certificate in ``cert_path`` and the key in ``key_path`` (which may be the same
    file), each checked, and checked to match."""
    certificate = read_certificates(cert_path, cert_flag)
    key = _read(key_path, key_flag)
    if _KEY_MARK not in key:
        raise StartupFailed(f"{key_flag} {key_path}: not a PEM private key file")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_path, key_path)
    except ssl.SSLError as error:
        mismatch = "MISMATCH" in str(error).upper()
        problem = (f"does not belong to the certificate in {cert_path}" if mismatch
                   else f"cannot be used ({_reason(error)})")
        raise StartupFailed(f"{key_flag} {key_path}: the private key {problem}") from None
    return KeyPair(certificate, key)


def server_context(cert_path: str, key_path: str, client_ca_path: str, *,
                   flags: tuple[str, str, str]) -> ssl.SSLContext:
    """A TLS server context for ``cert_path`` and ``key_path`` (``key_path`` may be empty when
    the certificate file holds the key too). With ``client_ca_path`` every client must show a
    certificate that CA signed (mutual TLS). ``flags`` name the three for the messages."""
    cert_flag, key_flag, ca_flag = flags
    read_key_pair(cert_path, cert_flag, key_path or cert_path, key_flag if key_path else cert_flag)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_path, key_path or None)
    if client_ca_path:
        read_certificates(client_ca_path, ca_flag)
        context.load_verify_locations(cafile=client_ca_path)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _reason(error: Exception) -> str:
    reason = getattr(error, "reason", None)
    return str(reason or error).lower().replace("_", " ")
