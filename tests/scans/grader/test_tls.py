"""HTTPS through the scanner's own transport (TLS via its asyncio network backend)."""

from __future__ import annotations

import datetime
import ipaddress
import ssl

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from scans.grader import ScanPlan, ScanTransport, run_scan
from tests.helpers.servers import END_CHUNKS, SSE_HEAD, good_stream, http_chunk, raw_server, read_request


def _self_signed(tmp_path):
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def _tls_server(cert_path, key_path):
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)

    async def handler(reader, writer):
        while True:
            await read_request(reader)
            writer.write(SSE_HEAD + http_chunk(good_stream(3)) + END_CHUNKS)
            await writer.drain()

    return raw_server(handler, ssl_context=context)


def test_a_scan_over_https_streams_through_the_scanner_transport(tmp_path):
    cert_path, key_path = _self_signed(tmp_path)
    trust = ssl.create_default_context(cafile=str(cert_path))
    with _tls_server(cert_path, key_path) as port:
        plan = ScanPlan(base_url=f"https://127.0.0.1:{port}/v1", model="m", levels=(1, 2),
                        requests=3, max_tokens=8, timeout_s=10)
        m = run_scan(plan, transport=ScanTransport(verify=trust))
    assert all(level.failed_by_class == {} for level in m.levels)
    assert all(len(r.output_times) == 3 for r in m.all_requests)


def test_an_untrusted_certificate_is_a_transport_error(tmp_path):
    cert_path, key_path = _self_signed(tmp_path)
    with _tls_server(cert_path, key_path) as port:
        plan = ScanPlan(base_url=f"https://127.0.0.1:{port}/v1", model="m", levels=(1,),
                        requests=2, max_tokens=8, timeout_s=10)
        m = run_scan(plan)
    assert m.preflight.stopped and m.levels[0].failed_by_class == {"transport_error": 1}
    assert "CERTIFICATE_VERIFY_FAILED" in m.levels[0].failure_examples["transport_error"]
    assert "TLS handshake failed" in m.preflight.cause
