"""Throwaway TLS material for tests, made with the ``openssl`` command line tool.

A CA and one leaf certificate signed by it, valid for ``127.0.0.1`` and ``localhost`` and for
both server and client use (so one pair serves a TLS server and a mutual-TLS client).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class TlsFiles:
    ca: Path  #: PEM CA certificate
    cert: Path  #: PEM leaf certificate signed by ``ca``
    key: Path  #: PEM unencrypted private key of ``cert``


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def make_tls_files(directory: Path) -> TlsFiles:
    """Write a CA and a leaf certificate into ``directory`` (raises if openssl fails)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key, csr = directory / "leaf.pem", directory / "leaf.key", directory / "leaf.csr"
    ext = directory / "leaf.ext"
    ext.write_text(
        "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
        "keyUsage=digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
             "/CN=SOLARIS test CA", "-keyout", ca_key, "-out", ca)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
             "-keyout", key, "-out", csr)  # fmt: skip
    _openssl("x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial",
             "-days", "2", "-extfile", ext, "-out", cert)  # fmt: skip
    return TlsFiles(ca=ca, cert=cert, key=key)


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)
