"""A throwaway PKI for mutual TLS between parties: one CA and one certificate per role.

FOR DEMOS AND TESTS ONLY, NOT FOR PRODUCTION.  It makes a short-lived CA on the spot and forgets
the CA's private key once the role certificates are signed, so nothing can be added or renewed
later; a real deployment gets its certificates from the organisations' own PKI, with keys that
never leave each party's machine.  What it shows is the shape the transport expects: every
party's certificate is signed by the one CA all parties trust and names the party's role as a
SAN DNS entry and as the CN (:func:`unifl.app.transport.grpc_transport._peer_is`), usable both as
a TLS server and as a TLS client.

Keys are EC P-256 (fast to make), written with mode 0600; certificates and the CA certificate are
world-readable PEM.  Generated with the ``cryptography`` package, so no ``openssl`` CLI is needed.
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from ...core.errors import ConfigError
from .grpc_transport import ROLES, TlsFiles

CA_CERT = "ca.pem"


def _write(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` to a new file created with ``mode`` (no window where a key is readable)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, mode)
    try:
        os.fchmod(fd, mode)          # an existing file keeps its old mode through O_CREAT
        os.write(fd, data)
    finally:
        os.close(fd)


def make_demo_pki(directory: str | os.PathLike, roles: tuple[str, ...] | list[str] = ROLES, *,
                  days: int = 1) -> dict[str, TlsFiles]:
    """A fresh CA and one certificate per role in ``directory``; returns role -> ``TlsFiles``
    (``<role>.pem``, ``<role>.key``, ``ca.pem``).  For demos and tests, not production."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    bad = [r for r in roles if r not in ROLES]
    if bad or not roles:
        raise ConfigError(f"demo PKI: roles must be among {ROLES}, got {list(roles)}")
    if days < 1:
        raise ConfigError(f"demo PKI: days must be >= 1, got {days}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc)
    not_before, not_after = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "unifl demo CA (throwaway)")])
    ca_cert = (x509.CertificateBuilder()
               .subject_name(ca_name).issuer_name(ca_name)
               .public_key(ca_key.public_key())
               .serial_number(x509.random_serial_number())
               .not_valid_before(not_before).not_valid_after(not_after)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, key_cert_sign=True,
                                            crl_sign=True, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                              critical=False)
               .sign(ca_key, hashes.SHA256()))
    ca_path = out / CA_CERT
    _write(ca_path, ca_cert.public_bytes(serialization.Encoding.PEM), 0o644)

    files: dict[str, TlsFiles] = {}
    for role in roles:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, role)]))
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(not_before).not_valid_after(not_after)
                .add_extension(x509.SubjectAlternativeName([x509.DNSName(role)]), critical=False)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]),
                               critical=False)
                .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                    ca_key.public_key()), critical=False)
                .sign(ca_key, hashes.SHA256()))
        key_path, cert_path = out / f"{role}.key", out / f"{role}.pem"
        _write(key_path, key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()), 0o600)
        _write(cert_path, cert.public_bytes(serialization.Encoding.PEM), 0o644)
        files[role] = TlsFiles(str(cert_path), str(key_path), str(ca_path))
    return files
