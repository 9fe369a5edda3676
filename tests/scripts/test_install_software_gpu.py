"""The software-GPU installer derives its backports source from the machine's own apt sources."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("install_software_gpu", ROOT / "scripts" / "install_software_gpu.py")
installer = importlib.util.module_from_spec(spec)
spec.loader.exec_module(installer)


def _apt(tmp_path, sources=None, one_line=None):
    (tmp_path / "sources.list.d").mkdir()
    if sources:
        (tmp_path / "sources.list.d" / "debian.sources").write_text(sources)
    if one_line:
        (tmp_path / "sources.list").write_text(one_line)
    return tmp_path


def test_deb822_source_is_reused(tmp_path):
    apt = _apt(tmp_path, sources=(
        "Types: deb\n# a comment\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\nComponents: main\n"))
    uris, signed = installer.find_debian_source("bookworm", apt)
    assert uris == "http://mirror.example/debian"
    assert signed.endswith("debian-archive-keyring.gpg")
    stanza = installer.backports_stanza("bookworm", uris, signed)
    assert "Suites: bookworm-backports" in stanza and f"URIs: {uris}" in stanza


def test_one_line_source_is_reused(tmp_path):
    apt = _apt(tmp_path, one_line=("deb http://mirror.example/debian-security bookworm-security main\n"
                                   "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian bookworm main\n"))
    assert installer.find_debian_source("bookworm", apt) == ("http://mirror.example/debian", "/k.gpg")


def test_no_source_found(tmp_path):
    assert installer.find_debian_source("bookworm", _apt(tmp_path)) is None


@pytest.mark.parametrize("os_info, route", [
    ({"ID": "debian", "VERSION_ID": "12", "VERSION_CODENAME": "bookworm"}, "backports"),
    ({"ID": "debian", "VERSION_ID": "13", "VERSION_CODENAME": "trixie"}, "archive"),
    ({"ID": "ubuntu", "VERSION_ID": "24.04", "VERSION_CODENAME": "noble"}, "archive"),
    ({"ID": "ubuntu", "VERSION_ID": "22.04", "VERSION_CODENAME": "jammy"}, None),
    ({"ID": "fedora", "VERSION_ID": "40"}, None),
])
def test_route_per_distribution(os_info, route):
    got = installer.plan(os_info)
    assert (got[0] if got else None) == route
