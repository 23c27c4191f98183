"""TLS for blob transfers, for clusters that encrypt Spark's own traffic.

When ``spark.network.crypto.enabled`` or ``spark.ssl.*`` is on, blob bytes must not cross the
network in clear either (``spark.steward.blob.encryption``). Spark's keystores are JKS or
PKCS#12 files that may exist only on some hosts, so instead of reading them the driver makes an
ephemeral key pair and self-signed certificate for each application and sends the certificate
to executors inside the executor context, the same broadcast that carries the application's
secret. Clients trust that one certificate and nothing else (it is their only trust anchor), so
no CA, hostname or clock outside the application is involved; the HMAC handshake of
:mod:`~spark_steward.blob.protocol` then runs inside the TLS session. TLS 1.3 only, and no
session tickets: a connection is reused for many fetches, never resumed.

The private key never touches a disk other than for the instant :mod:`ssl` needs to load it
(``load_cert_chain`` reads files only), in a 0600 file in a 0700 temp dir, removed right away.
"""

from __future__ import annotations

import datetime
import os
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from spark_steward.errors import SetupError
from spark_steward.private import open_new

#: How long the ephemeral certificate is valid: it is pinned, so this only has to outlast the
#: application and any clock skew between hosts.
_VALIDITY = datetime.timedelta(days=3650)
_SKEW = datetime.timedelta(days=1)


@dataclass(frozen=True)
class ServerIdentity:
    """The blob server's certificate (PEM, public) and private key (PEM, never logged)."""

    cert_pem: str
    key_pem: str = field(repr=False)


def new_identity(name: str = "spark-steward-blob-server") -> ServerIdentity:
    """A fresh P-256 key and a self-signed certificate for it."""
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID
    except ImportError as e:  # a dependency, but a broken environment deserves one line
        raise SetupError(f"blob encryption needs the 'cryptography' package ({e}); install "
                         "spark-steward with its dependencies or set "
                         "spark.steward.blob.encryption=false") from None
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW).not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .sign(key, hashes.SHA256()))
    return ServerIdentity(
        cert.public_bytes(serialization.Encoding.PEM).decode("ascii"),
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                          serialization.NoEncryption()).decode("ascii"))


def server_context(identity: ServerIdentity) -> ssl.SSLContext:
    """The server side: TLS 1.3, this identity, no session tickets."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.num_tickets = 0
    with tempfile.TemporaryDirectory(prefix="steward-tls-") as folder:  # created 0700
        path = Path(folder) / "identity.pem"
        with open_new(path, exclusive=True) as out:
            out.write((identity.key_pem + identity.cert_pem).encode("ascii"))
        try:
            context.load_cert_chain(path)
        finally:
            os.unlink(path)
    return context


def client_context(cert_pem: str) -> ssl.SSLContext:
    """The client side: TLS 1.3, trusting exactly the server certificate ``cert_pem``."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_3
    context.check_hostname = False  # the pinned certificate is the identity, not a name
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_verify_locations(cadata=cert_pem)
    return context
