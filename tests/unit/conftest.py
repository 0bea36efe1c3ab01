"""Fixtures shared by unit-test modules."""

from __future__ import annotations

import pytest

from tests.tls_certs import TlsFiles, make_tls_files, openssl_available


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """A test CA with a server and client certificate (skips without openssl)."""
    if not openssl_available():
        pytest.skip("openssl not found: cannot make test certificates")
    return make_tls_files(tmp_path_factory.mktemp("tls"))
