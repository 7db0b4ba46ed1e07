"""TLS on the KServe frontends against a real server, with certificates made for the test: a
CA, a server certificate for 127.0.0.1 it signed, and a client certificate it signed.

gRPC takes tritonserver's ``--grpc-use-ssl``/``--grpc-use-ssl-mutual`` with
``--grpc-server-cert``, ``--grpc-server-key`` and ``--grpc-root-cert``; HTTP takes inferd's
``--http-ssl-certfile``, ``--http-ssl-keyfile`` and ``--http-ssl-ca-certs``. tritonclient talks
to it over TLS (``ssl=True``); a plaintext client is refused, with mutual TLS so is a client
without a certificate; a bad or missing file stops the start naming the file."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from geventhttpclient.response import HTTPConnectionClosed
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.inferd_harness import InferdHarness, ServerHandle
from tests.services import import_or_missing

x509 = import_or_missing("cryptography.x509", "pip install cryptography; make setup installs it")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import NameOID  # noqa: E402

EXIT_SECS = 60.0
# How tritonclient.http (geventhttpclient) sees a server that closes or resets the connection
# without an HTTP answer, as a TLS server does to a client it will not talk to.
REFUSED = (HTTPConnectionClosed, ConnectionResetError)


@dataclass(frozen=True)
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_key: Path  # a key that belongs to no certificate here


def _name(common_name: str) -> Any:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key: Any, issuer: str, issuer_key: Any, *, ca: bool,
                 server: bool = False) -> Any:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(_name(issuer))
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write_key(path: Path, key: Any) -> Path:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    return path


def _write_certificate(path: Path, certificate: Any) -> Path:
    path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return path


def make_certificates(folder: Path) -> Certificates:
    folder.mkdir(parents=True, exist_ok=True)
    ca_key, server_key, client_key, other_key = (ec.generate_private_key(ec.SECP256R1())
                                                 for _ in range(4))
    ca = _certificate("inferd test CA", ca_key, "inferd test CA", ca_key, ca=True)
    server = _certificate("127.0.0.1", server_key, "inferd test CA", ca_key, ca=False,
                          server=True)
    client = _certificate("inferd test client", client_key, "inferd test CA", ca_key, ca=False)
    return Certificates(
        ca=_write_certificate(folder / "ca.pem", ca),
        server_cert=_write_certificate(folder / "server.pem", server),
        server_key=_write_key(folder / "server.key", server_key),
        client_cert=_write_certificate(folder / "client.pem", client),
        client_key=_write_key(folder / "client.key", client_key),
        other_key=_write_key(folder / "other.key", other_key),
    )


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certificates"))


def _simple_inputs(module: Any) -> list[Any]:
    inputs = [module.InferInput(name, [1, 16], "INT32") for name in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), np.int32))
    return inputs


def _tls_flags(certs: Certificates, *, mutual: bool) -> list[str]:
    flags = [f"--http-ssl-certfile={certs.server_cert}", f"--http-ssl-keyfile={certs.server_key}",
             f"--grpc-server-cert={certs.server_cert}", f"--grpc-server-key={certs.server_key}"]
    if mutual:
        flags += [f"--http-ssl-ca-certs={certs.ca}", "--grpc-use-ssl-mutual=true",
                  f"--grpc-root-cert={certs.ca}"]
    else:
        flags += ["--grpc-use-ssl=true"]
    return flags


@pytest.fixture(scope="module")
def tls_server(module_inferd: InferdHarness, certificates: Certificates) -> ServerHandle:
    return module_inferd.start(module_inferd.repository("simple"),
                               *_tls_flags(certificates, mutual=False))


@pytest.fixture(scope="module")
def mutual_server(module_inferd: InferdHarness, certificates: Certificates) -> ServerHandle:
    return module_inferd.start(module_inferd.repository("simple"),
                               *_tls_flags(certificates, mutual=True))


def test_http_over_tls(tls_server: ServerHandle, certificates: Certificates) -> None:
    client = httpclient.InferenceServerClient(
        tls_server.http_url, ssl=True, ssl_options={"ca_certs": str(certificates.ca)})
    assert client.is_server_live()
    result = client.infer("simple", _simple_inputs(httpclient))
    assert result.as_numpy("OUTPUT0").tolist() == [[2] * 16]


def test_http_plaintext_client_is_refused(tls_server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(tls_server.http_url, network_timeout=10.0)
    with pytest.raises(REFUSED):  # no HTTP answer: the server closes the connection
        client.is_server_live()


def test_http_client_that_does_not_trust_the_ca_is_refused(tls_server: ServerHandle) -> None:
    client = httpclient.InferenceServerClient(tls_server.http_url, ssl=True,
                                              network_timeout=10.0)
    with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
        client.is_server_live()


def test_grpc_over_tls(tls_server: ServerHandle, certificates: Certificates) -> None:
    client = grpcclient.InferenceServerClient(
        tls_server.grpc_url, ssl=True, root_certificates=str(certificates.ca))
    assert client.is_server_live()
    result = client.infer("simple", _simple_inputs(grpcclient))
    assert result.as_numpy("OUTPUT0").tolist() == [[2] * 16]


def test_grpc_plaintext_client_is_refused(tls_server: ServerHandle) -> None:
    client = grpcclient.InferenceServerClient(tls_server.grpc_url)
    with pytest.raises(InferenceServerException) as refused:
        client.is_server_live(client_timeout=10.0)
    assert refused.value.status() in ("StatusCode.UNAVAILABLE", "StatusCode.DEADLINE_EXCEEDED")


def test_mutual_tls_accepts_a_client_certificate(mutual_server: ServerHandle,
                                                 certificates: Certificates) -> None:
    http = httpclient.InferenceServerClient(
        mutual_server.http_url, ssl=True,
        ssl_options={"ca_certs": str(certificates.ca), "certfile": str(certificates.client_cert),
                     "keyfile": str(certificates.client_key)})
    assert http.infer("simple", _simple_inputs(httpclient)).as_numpy("OUTPUT1").sum() == 0
    grpc = grpcclient.InferenceServerClient(
        mutual_server.grpc_url, ssl=True, root_certificates=str(certificates.ca),
        private_key=str(certificates.client_key),
        certificate_chain=str(certificates.client_cert))
    assert grpc.infer("simple", _simple_inputs(grpcclient)).as_numpy("OUTPUT1").sum() == 0


def test_mutual_tls_refuses_a_client_without_certificate(mutual_server: ServerHandle,
                                                         certificates: Certificates) -> None:
    http = httpclient.InferenceServerClient(
        mutual_server.http_url, ssl=True, ssl_options={"ca_certs": str(certificates.ca)},
        network_timeout=10.0)
    with pytest.raises(REFUSED):  # the handshake fails: no HTTP answer
        http.is_server_live()
    grpc = grpcclient.InferenceServerClient(
        mutual_server.grpc_url, ssl=True, root_certificates=str(certificates.ca))
    with pytest.raises(InferenceServerException) as refused:
        grpc.is_server_live(client_timeout=10.0)
    assert refused.value.status() == "StatusCode.UNAVAILABLE"


@pytest.mark.parametrize("case", ["missing", "not_pem", "wrong_key", "mutual_without_root",
                                  "http_key_without_cert"])
def test_bad_tls_files_stop_the_start(inferd: InferdHarness, certificates: Certificates,
                                      tmp_path: Path, case: str) -> None:
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("this is not a certificate\n", encoding="utf-8")
    missing = tmp_path / "nowhere.pem"
    flags, expected = {
        "missing": ([f"--http-ssl-certfile={missing}"],
                    f"--http-ssl-certfile {missing}: cannot read the file"),
        "not_pem": (["--grpc-use-ssl=true", f"--grpc-server-cert={garbage}",
                     f"--grpc-server-key={certificates.server_key}"],
                    f"--grpc-server-cert {garbage}: not a PEM certificate file"),
        "wrong_key": (["--grpc-use-ssl", f"--grpc-server-cert={certificates.server_cert}",
                       f"--grpc-server-key={certificates.other_key}"],
                      f"--grpc-server-key {certificates.other_key}: the private key does not "
                      f"belong to the certificate in {certificates.server_cert}"),
        "mutual_without_root": (["--grpc-use-ssl-mutual=true",
                                 f"--grpc-server-cert={certificates.server_cert}",
                                 f"--grpc-server-key={certificates.server_key}"],
                                "--grpc-use-ssl-mutual needs --grpc-root-cert"),
        "http_key_without_cert": ([f"--http-ssl-keyfile={certificates.server_key}"],
                                  "--http-ssl-keyfile needs --http-ssl-certfile"),
    }[case]
    server = inferd.launch(inferd.repository(), *flags)
    assert server.wait_exit(EXIT_SECS) == 1
    assert expected in server.log(), server.log()
