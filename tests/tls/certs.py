"""A throwaway certificate authority and its certificates, made at run time for the TLS tests:
a server certificate for ``localhost`` and ``127.0.0.1``, a client certificate (mutual TLS),
and a second authority nobody trusts (a certificate the client must refuse)."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

#: Certificates are valid this long from an hour ago (a skewed clock still accepts them).
VALID = datetime.timedelta(days=2)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server: Pair
    client: Pair
    #: A server certificate signed by another authority (not trusted by ``ca``).
    untrusted_server: Pair
    #: The CA file of that other authority.
    untrusted_ca: Path
    #: A server certificate for another host name only (``elsewhere.invalid``), signed by ``ca``.
    wrong_host_server: Pair


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Pair:
    pair = Pair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    pair.key.chmod(0o600)
    return pair


def _authority(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALID)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    authority: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    common_name: str,
    names: list[x509.GeneralName],
    usage: x509.ObjectIdentifier,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    ca_cert, ca_key = authority
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALID)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca_key, hashes.SHA256()), key


def make(directory: Path) -> Certificates:
    """Writes the authorities and certificates under ``directory`` (keys 0600)."""
    directory.mkdir(parents=True, exist_ok=True)
    local = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    authority = _authority("tool-boundary test CA")
    other = _authority("another CA")
    ca = directory / "ca.crt"
    ca.write_bytes(authority[0].public_bytes(serialization.Encoding.PEM))
    untrusted_ca = directory / "other-ca.crt"
    untrusted_ca.write_bytes(other[0].public_bytes(serialization.Encoding.PEM))
    server = _leaf(authority, "localhost", local, ExtendedKeyUsageOID.SERVER_AUTH)
    client = _leaf(authority, "tool-boundary worker", [], ExtendedKeyUsageOID.CLIENT_AUTH)
    untrusted = _leaf(other, "localhost", local, ExtendedKeyUsageOID.SERVER_AUTH)
    wrong_host = _leaf(
        authority,
        "elsewhere.invalid",
        [x509.DNSName("elsewhere.invalid")],
        ExtendedKeyUsageOID.SERVER_AUTH,
    )
    return Certificates(
        ca=ca,
        server=_write(directory, "server", *server),
        client=_write(directory, "client", *client),
        untrusted_server=_write(directory, "untrusted-server", *untrusted),
        untrusted_ca=untrusted_ca,
        wrong_host_server=_write(directory, "wrong-host-server", *wrong_host),
    )
