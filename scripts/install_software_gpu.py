#!/usr/bin/env python3
"""Install a software Vulkan GPU (Mesa lavapipe) that LiteRT's WebGPU accelerator accepts.

LiteRT's pip wheel ships one GPU accelerator, built on Dawn (WebGPU), which runs on Vulkan on Linux.
A machine without a GPU can still run it on Mesa's CPU implementation of Vulkan ("lavapipe",
adapter name "llvmpipe") -- but only a recent one: Debian 12's own Mesa 22 is refused by Dawn,
Mesa >= 25 from bookworm-backports works.

What this script does, by distribution:
  * Debian 12 (bookworm): add a deb822 source for bookworm-backports that reuses the URIs and
    Signed-By of the machine's existing Debian source (no mirror host is hard-coded), then
    `apt-get install -t bookworm-backports mesa-vulkan-drivers libvulkan1`.
  * Debian 13+ and Ubuntu >= 24.04: the normal archive's mesa-vulkan-drivers is new enough.
  * anything else, or not root: print what to install and exit with status 3 (the caller goes on
    without a GPU; GPU tests then skip, or fail in CI).

Standard library only: it runs before the project's virtual environment exists.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGES = ["mesa-vulkan-drivers", "libvulkan1"]
BACKPORTS_FILE = Path("/etc/apt/sources.list.d/litert-gpu-bookworm-backports.sources")
EXIT_CANNOT_INSTALL = 3


def read_os_release(path: Path = Path("/etc/os-release")) -> dict[str, str]:
    info: dict[str, str] = {}
    if not path.exists():
        return info
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            info[key.strip()] = value.strip().strip('"')
    return info


def parse_deb822(text: str) -> list[dict[str, str]]:
    """Split a deb822 sources file into stanzas of {Field: value} (comments dropped)."""
    stanzas, current = [], {}
    last_key = None
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if current:
                stanzas.append(current)
            current, last_key = {}, None
            continue
        if raw[0] in " \t" and last_key:  # continuation line
            current[last_key] += "\n" + raw.strip()
            continue
        key, sep, value = raw.partition(":")
        if sep:
            last_key = key.strip()
            current[last_key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


_ONE_LINE = re.compile(r"^deb\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)")


def find_debian_source(codename: str, sources_dir: Path = Path("/etc/apt")) -> tuple[str, str | None] | None:
    """Return (URIs, Signed-By) of the existing source that serves `codename` itself.

    Looks at deb822 `*.sources` files first, then one-line `sources.list` entries. The security
    suite lives on a different URI, so only a source listing the bare codename is taken.
    """
    for path in sorted((sources_dir / "sources.list.d").glob("*.sources")):
        for stanza in parse_deb822(path.read_text()):
            if stanza.get("Enabled", "yes").lower() == "no":
                continue
            if "deb" not in stanza.get("Types", "").split():
                continue
            if codename in stanza.get("Suites", "").split():
                return stanza["URIs"], stanza.get("Signed-By")
    lists = [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*.list"))]
    for path in lists:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
            m = _ONE_LINE.match(line.strip())
            if m and m.group("suite") == codename:
                signed = None
                for opt in (m.group("opts") or "").split():
                    if opt.startswith("signed-by="):
                        signed = opt.split("=", 1)[1]
                return m.group("uri"), signed
    return None


def backports_stanza(codename: str, uris: str, signed_by: str | None) -> str:
    lines = [
        "# Added by litert-gpu-recipes scripts/install_software_gpu.py: Mesa >= 25 (software Vulkan)",
        "Types: deb",
        f"URIs: {uris}",
        f"Suites: {codename}-backports",
        "Components: main",
    ]
    if signed_by:
        lines.append(f"Signed-By: {signed_by}")
    return "\n".join(lines) + "\n"


def plan(os_info: dict[str, str]) -> tuple[str, list[str]] | None:
    """Which route installs a usable lavapipe here: ("backports", pkgs) / ("archive", pkgs) / None."""
    distro, version = os_info.get("ID", ""), os_info.get("VERSION_ID", "0")
    try:
        major = float(version)
    except ValueError:
        major = 0.0
    if distro == "debian" and os_info.get("VERSION_CODENAME") == "bookworm":
        return "backports", PACKAGES
    if distro == "debian" and major >= 13:
        return "archive", PACKAGES
    if distro == "ubuntu" and major >= 24.04:
        return "archive", PACKAGES
    return None


def run(cmd: list[str]) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    args = parser.parse_args(argv)

    os_info = read_os_release()
    route = plan(os_info)
    pretty = os_info.get("PRETTY_NAME", "this system")
    if route is None:
        print(f"[software-gpu] no known route for {pretty}: install a Vulkan driver from Mesa >= 25 "
              f"(lavapipe; Debian/Ubuntu package: {' '.join(PACKAGES)}) by hand.")
        return EXIT_CANNOT_INSTALL
    how, packages = route
    if how == "backports":
        codename = os_info["VERSION_CODENAME"]
        source = find_debian_source(codename)
        if source is None:
            print(f"[software-gpu] found no apt source for '{codename}' to base {codename}-backports on.")
            return EXIT_CANNOT_INSTALL
        stanza = backports_stanza(codename, *source)
        install = ["apt-get", "install", "-y", "--no-install-recommends", "-t", f"{codename}-backports", *packages]
    else:
        stanza = None
        install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]

    if args.dry_run:
        if stanza:
            print(f"[software-gpu] would write {BACKPORTS_FILE}:\n{stanza}")
        print("[software-gpu] would run: apt-get update; " + " ".join(install))
        return 0
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        hint = f"add {os_info.get('VERSION_CODENAME', '')}-backports and " if stanza else ""
        print(f"[software-gpu] need root and apt to install the software GPU. As root: {hint}"
              f"{' '.join(install)}")
        return EXIT_CANNOT_INSTALL
    if stanza:
        BACKPORTS_FILE.write_text(stanza)
        print(f"[software-gpu] wrote {BACKPORTS_FILE}")
    run(["apt-get", "update", "-q"])
    run(install)
    return 0


if __name__ == "__main__":
    sys.exit(main())
