"""The schedd sets a job's X.509 attributes from its proxy file, as HTCondor's schedd
does (ReadProxyFileIntoAd): what the submitter claimed is dropped, what the file says is
set; a file not there yet (spooled later) leaves them unset."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from htgrid.classad import ClassAd
from htgrid.client.x509 import make_proxy, read_proxy
from htgrid.queue import Identity, JobQueue
from htgrid.schedd._config import ScheddConfig
from htgrid.schedd._service import QueueService
from htgrid.schedd._submit import proxy_attrs
from htgrid.schedd._worker import QueueWorker
from htgrid.testing.voms import voms_extension


def _user() -> tuple[bytes, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.DOMAIN_COMPONENT, "org"),
            x509.NameAttribute(NameOID.COMMON_NAME, "Jane Doe"),
        ]
    )
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=3))
        .sign(key, hashes.SHA256())
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), pem


def test_the_proxy_file_not_the_submitter_names_the_identity(tmp_path: Path) -> None:
    (tmp_path / "x509up").write_bytes(make_proxy(*_user()))
    ad = ClassAd(
        {
            "Iwd": str(tmp_path),
            "x509userproxy": "x509up",
            "x509userproxysubject": "/CN=Someone Else",
            "x509UserProxyFirstFQAN": "/atlas/Role=production",
        }
    )
    proxy_attrs(ad, None)
    info = read_proxy(tmp_path / "x509up")
    assert ad["x509userproxysubject"] == "/DC=org/CN=Jane Doe"
    assert ad["x509UserProxyExpiration"] == info.expiration
    assert "x509UserProxyFirstFQAN" not in ad


def test_a_proxy_not_there_yet_sets_nothing_and_keeps_no_claim(tmp_path: Path) -> None:
    ad = ClassAd({"Iwd": str(tmp_path), "x509userproxy": "later", "x509userproxysubject": "/CN=X"})
    proxy_attrs(ad, None)
    assert "x509userproxysubject" not in ad
    assert ad["x509userproxy"] == "later"


def test_use_voms_attributes_decides_whether_the_fqans_go_into_the_job_ad(
    tmp_path: Path,
) -> None:
    # HTCondor's USE_VOMS_ATTRIBUTES (default false): the schedd sets the VO and FQANs of
    # the proxy's VOMS attributes only when it is true; the subject is set either way.
    (tmp_path / "x509up").write_bytes(
        make_proxy(*_user(), extra=[voms_extension("cms", ["/cms/Role=pilot", "/cms"])])
    )
    assert ScheddConfig.load(tmp_path).use_voms_attributes is False
    (tmp_path / "htgrid.conf").write_text("USE_VOMS_ATTRIBUTES = true\n")
    assert ScheddConfig.load(tmp_path).use_voms_attributes is True
    worker = QueueWorker(JobQueue.open(tmp_path / "queue", fsync=False))
    alice = Identity("alice")
    job = {"Cmd": "/bin/true", "JobUniverse": 9, "Iwd": str(tmp_path), "x509userproxy": "x509up"}

    async def submitted(use_voms: bool) -> ClassAd:
        service = QueueService(
            worker, dict, spool=lambda c, p: tmp_path / str(c) / str(p), use_voms=use_voms
        )
        cluster = await service.reserve_cluster(alice)
        (job_id,) = await service.submit(alice, cluster, ClassAd(job), [ClassAd()])
        return await worker.read(lambda q: q.get(job_id))

    try:
        plain = asyncio.run(submitted(False))
        assert plain["x509userproxysubject"] == "/DC=org/CN=Jane Doe"
        assert "x509UserProxyFirstFQAN" not in plain and "x509UserProxyVOName" not in plain
        voms = asyncio.run(submitted(True))
        assert voms["x509UserProxyVOName"] == "cms"
        assert voms["x509UserProxyFirstFQAN"] == "/cms/Role=pilot"
        assert voms["x509UserProxyFQAN"] == "/DC=org/CN=Jane Doe,/cms/Role=pilot,/cms"
    finally:
        worker.close()
