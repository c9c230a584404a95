"""TLS certificates for NATS between hosts: a private CA and one certificate per server.

    python -m actline.bus.certs --out deploy/tls --hosts 10.0.0.10,10.0.0.11,10.0.0.12

writes ``ca.pem`` (give it to every client: ``ACTLINE_NATS_CA``), ``ca-key.pem`` (into
``--ca-key-dir``, default ``--out``: keep it off the servers) and ``server.pem`` /
``server-key.pem`` (every host's nats-server, for clients and for the routes between
servers; the names in ``--hosts`` and 127.0.0.1 are its subject alternative names, so
clients verify the host they dial). Keys are 0600.
A deployment with its own PKI supplies these four files instead.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from .auth import write_secret
from .embedded import TlsFiles

VALID_DAYS = 825


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _alt_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_certs(out: Path, hosts: Sequence[str], *, ca_key_dir: Path | None = None) -> TlsFiles:
    """A CA and a server certificate for ``hosts`` (plus 127.0.0.1 and localhost) in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    until = now + datetime.timedelta(days=VALID_DAYS)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("actline NATS CA"))
        .issuer_name(_name("actline NATS CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names = list(dict.fromkeys([*hosts, "127.0.0.1", "localhost"]))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(names[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(until)
        .add_extension(x509.SubjectAlternativeName([_alt_name(h) for h in names]), critical=False)
        .add_extension(
            # serverAuth for clients, clientAuth for the routes between servers
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(cert=out / "server.pem", key=out / "server-key.pem", ca=out / "ca.pem")
    files.ca.write_text(ca.public_bytes(serialization.Encoding.PEM).decode())
    write_secret((ca_key_dir or out) / "ca-key.pem", _pem(ca_key))
    files.cert.write_text(cert.public_bytes(serialization.Encoding.PEM).decode())
    write_secret(files.key, _pem(key))
    return files


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m actline.bus.certs", description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="folder for the PEM files")
    parser.add_argument("--hosts", required=True, help="comma-separated IPs or names")
    parser.add_argument("--ca-key-dir", type=Path, default=None, help="where the CA key goes")
    args = parser.parse_args(argv)
    hosts = [h.strip() for h in args.hosts.split(",") if h.strip()]
    files = make_certs(args.out, hosts, ca_key_dir=args.ca_key_dir)
    where = args.ca_key_dir or args.out
    print(f"wrote {files.ca}, {files.cert}, {files.key}; the CA key is in {where}: keep it safe")
    return 0


if __name__ == "__main__":
    sys.exit(main())
