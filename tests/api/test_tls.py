"""TLS and mutual TLS on the listener, with certificates made for the test (``cryptography``)."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from admission_service.api.tenancy import hash_token
from admission_service.cli import main
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from promptadmission.v1 import admission_service_pb2 as api

from tests.api.support import StartApi, async_stub

TOKEN = "tls-test-token"


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


class Authority:
    """A throwaway CA that issues server and client certificates into ``directory``."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self.key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
        self.certificate = (
            self._builder(subject, subject, self.key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.cert = directory / f"{name}-ca.pem"
        self.cert.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    @staticmethod
    def _builder(
        subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePublicKey
    ) -> x509.CertificateBuilder:
        now = datetime.datetime.now(datetime.UTC)
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(issuer)
            .public_key(key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    def issue(self, common_name: str, *, server: bool) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = self._builder(subject, self.certificate.subject, key.public_key())
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if server:
            names: list[x509.GeneralName] = [
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
            ]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        certificate = builder.sign(self.key, hashes.SHA256())
        issued = Issued(
            self.directory / f"{self.name}-{common_name}.pem",
            self.directory / f"{self.name}-{common_name}.key",
        )
        issued.cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
        issued.key.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        return issued


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[Authority, Issued, Issued, Issued]:
    directory = tmp_path_factory.mktemp("pki")
    ca, stranger = Authority(directory, "ours"), Authority(directory, "theirs")
    return (
        ca,
        ca.issue("server", server=True),
        ca.issue("harness", server=False),
        stranger.issue("intruder", server=False),
    )


def credentials(ca: Authority, client: Issued | None = None) -> grpc.ChannelCredentials:
    return grpc.ssl_channel_credentials(
        root_certificates=ca.cert.read_bytes(),
        private_key=client.key.read_bytes() if client else None,
        certificate_chain=client.cert.read_bytes() if client else None,
    )


async def list_sessions(
    target: str, channel_credentials: grpc.ChannelCredentials | None, token: str = TOKEN
) -> None:
    channel = (
        grpc.aio.insecure_channel(target)
        if channel_credentials is None
        else grpc.aio.secure_channel(target, channel_credentials)
    )
    try:
        await async_stub(channel).ListSessions(
            api.ListSessionsRequest(), metadata=(("authorization", f"Bearer {token}"),), timeout=5
        )
    finally:
        await channel.close(None)


async def test_tls_serves_clients_that_trust_the_ca(
    start_api: StartApi, pki: tuple[Authority, Issued, Issued, Issued]
) -> None:
    ca, server_cert, _, _ = pki
    client = await start_api(
        tls_cert_file=server_cert.cert,
        tls_key_file=server_cert.key,
        token_tenants={hash_token(TOKEN): "tls-tenant"},
    )
    target = client.server.target
    await list_sessions(target, credentials(ca))

    with pytest.raises(grpc.aio.AioRpcError) as plaintext:
        await list_sessions(target, None)
    assert plaintext.value.code() is grpc.StatusCode.UNAVAILABLE

    with pytest.raises(grpc.aio.AioRpcError) as untrusted:  # a server cert of another CA
        await list_sessions(target, credentials(Authority(ca.directory, "other")))
    assert untrusted.value.code() is grpc.StatusCode.UNAVAILABLE

    with pytest.raises(grpc.aio.AioRpcError) as no_token:  # TLS does not replace the token
        await list_sessions(target, credentials(ca), token="wrong")
    assert no_token.value.code() is grpc.StatusCode.UNAUTHENTICATED


async def test_mutual_tls_requires_a_client_certificate_of_the_ca(
    start_api: StartApi, pki: tuple[Authority, Issued, Issued, Issued]
) -> None:
    ca, server_cert, harness, intruder = pki
    client = await start_api(
        tls_cert_file=server_cert.cert,
        tls_key_file=server_cert.key,
        tls_client_ca_file=ca.cert,
        token_tenants={hash_token(TOKEN): "tls-tenant"},
    )
    target = client.server.target
    await list_sessions(target, credentials(ca, harness))

    for refused in (credentials(ca), credentials(ca, intruder)):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await list_sessions(target, refused)
        assert caught.value.code() is grpc.StatusCode.UNAVAILABLE


async def test_the_health_command_speaks_tls(
    start_api: StartApi, pki: tuple[Authority, Issued, Issued, Issued]
) -> None:
    ca, server_cert, harness, _ = pki
    client = await start_api(
        tls_cert_file=server_cert.cert, tls_key_file=server_cert.key, tls_client_ca_file=ca.cert
    )
    target = client.server.target
    base = ["health", "--target", target, "--tls-ca", str(ca.cert), "--timeout", "5"]
    client_cert = ["--tls-cert", str(harness.cert), "--tls-key", str(harness.key)]
    assert await asyncio.to_thread(main, [*base, *client_cert]) == 0
    assert await asyncio.to_thread(main, base) == 1  # no client certificate
    assert await asyncio.to_thread(main, ["health", "--target", target, "--timeout", "2"]) == 1
