"""Certificates for the small real web, made with the openssl command line (no Python crypto).

A test CA signs the good leaf (every good site's name, plus IP SANs), an expired leaf and a
leaf for another name; a self-signed leaf stands alone. ``openssl ca`` is used for every signed
leaf because it is the one OpenSSL 3.0 tool that takes a start date in the past, so the expired
certificate is made the same way as the good one, only with other dates. EC P-256 keys keep the
key generation in milliseconds.
"""

from __future__ import annotations

import datetime
import subprocess
from dataclasses import dataclass
from pathlib import Path

_CA_CONFIG = """\
[ca]
default_ca = test_ca

[test_ca]
dir = {dir}
database = $dir/index.txt
new_certs_dir = $dir/issued
serial = $dir/serial
default_md = sha256
policy = anything
unique_subject = no
copy_extensions = none
email_in_dn = no

[anything]
commonName = supplied
"""

_LEAF_EXTENSIONS = """\
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
subjectAltName = {san}
"""


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Certificates:
    ca: Path  # PEM of the test CA: what a client passes as its CA bundle
    good: KeyPair  # CA-signed, valid now, for every good name and IP
    expired: KeyPair  # CA-signed, valid only in 2020
    selfsigned: KeyPair  # its own issuer, not the CA
    wrongname: KeyPair  # CA-signed, valid now, for a name no site has


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def _san(names: list[str], ips: list[str]) -> str:
    return ", ".join([f"DNS:{name}" for name in names] + [f"IP:{ip}" for ip in ips])


def _key_and_request(directory: Path, stem: str, common_name: str) -> tuple[Path, Path]:
    key, request = directory / f"{stem}.key", directory / f"{stem}.csr"
    _openssl(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(request), "-subj", f"/CN={common_name}", cwd=directory,
    )
    return key, request


def _signed(directory: Path, stem: str, *, names: list[str], ips: list[str], dates: tuple[str, str]) -> KeyPair:
    key, request = _key_and_request(directory, stem, names[0])
    extensions = directory / f"{stem}.ext"
    extensions.write_text(_LEAF_EXTENSIONS.format(san=_san(names, ips)))
    cert = directory / f"{stem}.pem"
    _openssl(
        "ca", "-batch", "-notext", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key",
        "-in", str(request), "-out", str(cert), "-extfile", str(extensions),
        "-startdate", dates[0], "-enddate", dates[1], cwd=directory,
    )
    return KeyPair(cert=cert, key=key)


def make_certificates(
    directory: Path, *, names: list[str], ips: list[str], expired_name: str, selfsigned_name: str, wrong_name: str
) -> Certificates:
    """Create the CA and the four leaves in ``directory``: the good leaf for ``names`` and
    ``ips`` (names[0] its CN), the others each for their one name."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "issued").mkdir(exist_ok=True)
    (directory / "index.txt").write_text("")
    (directory / "serial").write_text("1000\n")
    (directory / "ca.cnf").write_text(_CA_CONFIG.format(dir=directory))
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", "ca.key", "-out", "ca.pem", "-days", "30", "-subj", "/CN=realweb test CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        "-addext", "subjectKeyIdentifier=hash", cwd=directory,
    )
    good = _signed(directory, "good", names=names, ips=ips, dates=_valid_now(days=30))
    expired = _signed(directory, "expired", names=[expired_name], ips=[], dates=("20200101000000Z", "20200201000000Z"))
    wrong = _signed(directory, "wrongname", names=[wrong_name], ips=[], dates=_valid_now(days=30))
    self_key, self_cert = directory / "selfsigned.key", directory / "selfsigned.pem"
    _openssl(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(self_key), "-out", str(self_cert), "-days", "30", "-subj", f"/CN={selfsigned_name}",
        "-addext", f"subjectAltName={_san([selfsigned_name], [])}", cwd=directory,
    )
    return Certificates(
        ca=directory / "ca.pem", good=good, expired=expired,
        selfsigned=KeyPair(cert=self_cert, key=self_key), wrongname=wrong,
    )


def _valid_now(*, days: int) -> tuple[str, str]:
    """(startdate, enddate) in openssl's YYYYMMDDHHMMSSZ form, from a day ago (so clock skew
    between openssl and a client is harmless) for ``days`` days."""
    begin = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=1)
    end = begin + datetime.timedelta(days=days)
    return begin.strftime("%Y%m%d%H%M%SZ"), end.strftime("%Y%m%d%H%M%SZ")
