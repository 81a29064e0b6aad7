"""Per-state-dir PKI: a CA and a loopback server certificate, generated once and reused.

Clients trust the CA through ``certificate-authority-data`` in the kubeconfig. Reusing the files on
restart keeps kubeconfigs written by an earlier run of the same state dir valid.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pki:
    ca_cert: Path
    server_cert: Path
    server_key: Path

    @property
    def ca_pem(self) -> bytes:
        return self.ca_cert.read_bytes()


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _builder(subject: str, issuer: str, public_key: ec.EllipticCurvePublicKey) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=3650))
    )


def ensure_pki(directory: Path) -> Pki:
    """Create ``ca.crt``, ``server.crt`` and ``server.key`` under ``directory`` unless present."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory / "ca.crt", directory / "server.crt", directory / "server.key")
    if pki.ca_cert.exists() and pki.server_cert.exists() and pki.server_key.exists():
        return pki
    ca_key = _key()
    ca = (
        _builder("kubesim-ca", "kubesim-ca", ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = _key()
    names = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    server = (
        _builder("kube-apiserver", "kubesim-ca", server_key.public_key())
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    (directory / "ca.key").write_bytes(_pem_key(ca_key))
    (directory / "ca.key").chmod(0o600)
    pki.server_key.write_bytes(_pem_key(server_key))
    pki.server_key.chmod(0o600)
    pki.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    pki.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return pki
