"""Re-create ``sources/*.txt.gz`` and ``sources/manifest.json`` from registry packages.

This is a one-off harvesting tool, kept so that the provenance of every stored
text is reproducible and reviewable. ``build.py`` never calls it: the stored,
gzip'd sources are the data of record.

Families:

* ``oss-licenses``: open-source licence texts from the ScanCode licence
  database shipped in the PyPI wheel ``scancode-toolkit-mini`` (fetched with
  ``pip download``).
* ``debian-copyright``: the ``/usr/share/doc/<pkg>/copyright`` files of
  Debian bookworm (main) packages installed on the harvesting machine; each
  file is checked against the md5sum dpkg recorded for its package and the
  package version must be one the Debian archive serves.
* ``gnu-manuals``: Info manuals from Debian bookworm (main) packages, fetched
  with ``apt-get download`` and unpacked with ``dpkg-deb -x``.

Members are appended in a fixed order until the family holds
``TARGET_TOKENS`` Gemma tokens, so that the 1M build has real text to spare.

Run (needs network access to PyPI / Debian and the Gemma tokenizer)::

    .venv/bin/python -m bench.devsets.selection.prepare_sources [--tokenizer PATH]
"""

from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .text import normalise

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources"
TARGET_TOKENS = 1_120_000

SCANCODE_PKG = "scancode-toolkit-mini"
SCANCODE_VERSION = "32.5.0"
OPEN_CATEGORIES = ("Permissive", "Copyleft", "Copyleft Limited", "Public Domain")

# Debian packages fetched with `apt-get download` (beyond those installed on the
# harvesting machine) for their copyright files: well-known packages whose
# .deb is under 12 MB.
EXTRA_COPYRIGHT_PACKAGES = [
    "kicad-libraries", "ghostscript", "tk8.6", "gnuplot-data", "libgeos-c1v5", "tcl8.6",
    "imagemagick-6-common", "libpq5", "libpango-1.0-0", "fontconfig-config", "cups-daemon",
    "libfreetype6", "vlc-data", "libcairo2", "libgs10-common", "libsdl2-2.0-0", "ruby3.1", "libxml2",
    "php8.2-common", "libx11-6", "libsqlite3-0", "gnome-shell", "samba", "libopencv-core406",
    "libgstreamer1.0-0", "libproj25", "libsane-common", "libglib2.0-0", "openssl", "libvirt0",
    "libqt5core5a", "texinfo", "libmagickcore-6.q16-6", "libpoppler126", "libharfbuzz0b",
    "gstreamer1.0-plugins-good", "audacity-data", "rustc", "perl-modules-5.36", "libgtk-3-0",
    "python3-numpy", "libavcodec59", "qgis-providers", "vim-runtime", "libgl1-mesa-dri",
    "mariadb-server-core", "musescore3", "libgdal32", "qemu-system-x86",
    "libssl3", "libcurl4", "curl", "libgnutls30", "libkrb5-3", "libldap-2.5-0", "libsasl2-2",
    "libpcre2-8-0", "libicu72", "libtiff6", "libpng16-16", "libjpeg62-turbo", "libwebp7", "libopenjp2-7",
    "libexif12", "libgphoto2-6", "libmpg123-0", "libvorbis0a", "libflac12", "libopus0", "libsndfile1",
    "libpulse0", "pulseaudio", "libasound2", "libdrm2", "libwayland-client0", "libxcb1", "libxkbcommon0",
    "libinput10", "libevdev2", "libudev1", "systemd", "udev", "dbus", "libpolkit-gobject-1-0",
    "network-manager", "wpasupplicant", "openssh-client", "openssh-server", "rsync", "tmux", "screen", "zsh",
    "fish", "mc", "htop", "lsof", "strace", "gdb", "nano", "less", "groff-base", "man-db", "info",
    "ncurses-base", "libncurses6", "libreadline8", "libedit2", "liblzma5", "libzstd1", "libbz2-1.0", "zlib1g",
    "libarchive13", "p7zip-full", "unzip", "zip", "cpio", "tar", "xz-utils", "lz4", "libnss3", "libnspr4",
    "ca-certificates", "gpg", "libgcrypt20", "libksba8", "libassuan0", "pinentry-curses", "libsecret-1-0",
    "libpython3.11-stdlib", "python3.11", "libperl5.36", "git", "subversion", "mercurial", "cvs", "bzr",
    "libapr1", "apache2-bin", "nginx-common", "lighttpd", "exim4-base", "postfix", "dovecot-core", "bind9",
    "isc-dhcp-client", "dnsmasq-base", "iptables", "nftables",
    "python3-requests", "python3-urllib3", "python3-lxml", "python3-pil", "python3-yaml", "python3-cryptography",
    "python3-setuptools", "python3-pip", "python3-matplotlib", "python3-pandas", "python3-django", "python3-flask",
    "python3-jinja2", "python3-sqlalchemy", "python3-twisted", "python3-gi", "python3-dbus", "python3-psycopg2",
    "python3-babel", "python3-docutils", "python3-sphinx", "python3-pygments", "python3-sympy", "python3-networkx",
    "python3-bs4", "python3-html5lib", "python3-zmq", "python3-tornado", "python3-paramiko", "libwww-perl",
    "libdbi-perl", "libjson-perl", "libxml-parser-perl", "libmojolicious-perl", "ruby-nokogiri", "ruby-rack",
    "libjs-jquery", "libjs-jquery-ui", "libjs-bootstrap4", "node-lodash", "fonts-dejavu-core", "fonts-liberation",
    "fonts-freefont-ttf", "fonts-font-awesome", "gimp", "vlc-plugin-base", "libavformat59", "libavutil57",
    "libswscale6", "libx264-164", "libx265-199", "libvpx7", "libdav1d6", "libaom3", "libsvtav1enc1",
    "libopenexr-3-1-30", "libraw20", "libheif1", "libjxl0.7", "libgd3", "libcairo-gobject2", "libgdk-pixbuf-2.0-0",
    "librsvg2-2", "libjavascriptcoregtk-4.1-0", "libqt5gui5", "libqt6core6", "libkf5coreaddons5", "libgtk-4-1",
    "libadwaita-1-0", "libsoup-3.0-0", "libnm0", "libmm-glib0", "libgphoto2-port12", "libusb-1.0-0",
    "libbluetooth3", "bluez", "libcups2", "cups-filters", "hplip-data", "printer-driver-gutenprint", "ghostscript-x",
    "poppler-utils", "qpdf", "tesseract-ocr", "libleptonica-dev",
]

# (info file stem, Debian package); in this order.
GNU_MANUALS = [  # sed first: its manual is mostly prose, so the 32K build is not half menus
    ("sed", "sed"),
    ("diffutils", "diffutils"),
    ("wget", "wget"),
    ("find", "findutils"),
    ("gzip", "gzip"),
    ("grep", "grep"),
    ("coreutils", "coreutils"),
    ("gnupg", "gnupg"),
    ("gettext", "gettext"),
    ("autosprintf", "gettext"),
    ("time", "time"),
    ("ed", "ed"),
    ("bc", "bc"),
    ("rluserman", "readline-common"),
    ("find-maint", "findutils"),
    ("libtasn1", "libtasn1-doc"),
    ("nettle", "nettle-dev"),
    ("bzip2", "bzip2-doc"),
    ("gpgrt", "libgpg-error-dev"),
    ("libffi", "libffi-dev"),
    ("m4", "m4-doc"),
    ("bash", "bash-doc"),
]

SEP = "=" * 8
MAX_STANZA_CHARS = 6000  # longer non-prose paragraphs (file lists) disqualify a Debian copyright file


def separator(title: str) -> str:
    return f"{SEP} {title} {SEP}"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def order_key(name: str) -> str:
    """Deterministic shuffle: order members by the hash of their name."""
    return hashlib.sha256(name.encode()).hexdigest()


class Collector:
    """Joins member texts with separators until a token budget is reached."""

    def __init__(self, family: str, tokenizer) -> None:
        self.family = family
        self.tok = tokenizer
        self.parts: list[str] = []
        self.members: list[dict] = []
        self.tokens = 0
        self.chars = 0

    def full(self) -> bool:
        return self.tokens >= TARGET_TOKENS

    def add(self, title: str, text: str, meta: dict) -> None:
        text = text.strip("\n")
        block = ("\n\n" if self.parts else "") + separator(title) + "\n\n" + text + "\n"
        start = self.chars + block.index(separator(title))
        self.parts.append(block)
        self.chars += len(block)
        self.tokens += len(self.tok(block, add_special_tokens=False)["input_ids"])
        self.members.append({**meta, "title": title, "char_start": start, "chars": len(text)})

    def write(self) -> dict:
        text = "".join(self.parts)
        raw = text.encode("utf-8")
        path = SOURCES / f"{self.family}.txt.gz"
        with open(path, "wb") as fh:
            # mtime=0 and no file name: byte-identical output on every run.
            with gzip.GzipFile(filename="", mode="wb", fileobj=fh, mtime=0, compresslevel=9) as gz:
                gz.write(raw)
        return {
            "file": f"sources/{self.family}.txt.gz",
            "sha256_text": sha256(raw),
            "chars": len(text),
            "tokens_approx": self.tokens,
            "members": self.members,
        }


# --------------------------------------------------------------------------- licences


def oss_licenses(tok, work: Path) -> dict:
    wheel_dir = work / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(wheel_dir),
                    f"{SCANCODE_PKG}=={SCANCODE_VERSION}"], check=True)
    wheel = next(wheel_dir.glob("scancode_toolkit_mini-*.whl"))
    col = Collector("oss-licenses", tok)
    seen: set[str] = set()
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith("licensedcode/data/licenses/") and n.endswith(".LICENSE")]
        entries = []
        for n in names:
            raw = zf.read(n)
            s = raw.decode("utf-8")
            if not s.startswith("---\n"):
                continue
            head, _, body = s[4:].partition("\n---\n")
            fields = dict(re.findall(r"^(key|name|category|spdx_license_key|is_deprecated): *(.*)$", head, re.M))
            key = fields.get("key", "")
            if fields.get("category") not in OPEN_CATEGORIES or fields.get("is_deprecated") == "yes":
                continue
            if key.endswith("-plus"):  # same text as the base licence plus "or later"
                continue
            body = normalise(body).strip("\n")
            if len(body) < 400:
                continue
            entries.append((order_key(key), key, fields, n, raw, body))
    for _, key, fields, path, raw, body in sorted(entries):
        if col.full():
            break
        h = sha256(body.encode())
        if h in seen:
            continue
        seen.add(h)
        col.add(f"Licence: {fields.get('name', key).strip()} [{key}]", body, {
            "path": path, "sha256_file": sha256(raw), "category": fields.get("category"),
            "spdx": fields.get("spdx_license_key", "").strip(),
        })
    return {
        "registry": "PyPI", "package": SCANCODE_PKG, "version": SCANCODE_VERSION,
        "licence": "each member is the text of an open-source licence (ScanCode category Permissive, Copyleft, "
                   "Copyleft Limited or Public Domain); the ScanCode LicenseDB data is CC-BY-4.0, "
                   "(c) nexB Inc. and others",
        **col.write(),
    }


# --------------------------------------------------------------------------- Debian copyright


def dpkg_md5(pkg: str, relpath: str) -> str | None:
    for f in glob.glob(f"/var/lib/dpkg/info/{pkg}.md5sums") + glob.glob(f"/var/lib/dpkg/info/{pkg}:*.md5sums"):
        for line in open(f, encoding="utf-8", errors="replace"):
            md5, _, p = line.strip().partition("  ")
            if p == relpath:
                return md5
    return None


def archive_versions(pkgs: list[str]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for i in range(0, len(pkgs), 200):
        res = subprocess.run(["apt-cache", "madison", *pkgs[i:i + 200]], capture_output=True, text=True)
        for line in res.stdout.splitlines():
            cols = [c.strip() for c in line.split("|")]
            if len(cols) >= 3 and "debian.org" in cols[2]:
                out.setdefault(cols[0], set()).add(cols[1])
    return out


def dep5_licence(text: str) -> str:
    if not text.startswith(("Format:", "Format-Specification:")):
        return "see the file (free-form copyright file)"
    lic = re.findall(r"^License: *(\S.*)$", text, re.M)
    uniq = list(dict.fromkeys(lic))
    return ", ".join(uniq[:6]) + (" ..." if len(uniq) > 6 else "")


def unpack_deb(pkg: str, debs: Path, work: Path) -> tuple[Path, str]:
    """Unpack the downloaded ``.deb`` of ``pkg`` (in ``debs``) under ``work/root/pkg``: (root, version)."""
    deb = sorted(debs.glob(f"{pkg}_*.deb"))[-1]
    ver = subprocess.run(["dpkg-deb", "-f", str(deb), "Version"], capture_output=True, text=True,
                         check=True).stdout.strip()
    root = work / "root" / pkg
    root.mkdir(parents=True)
    subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    return root, ver


def debian_copyright(tok, work: Path) -> dict:
    q = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Status}\n"],
                       capture_output=True, text=True, check=True).stdout
    installed = {}
    for line in q.splitlines():
        pkg, ver, status = line.split("\t")
        if status.endswith(" installed"):
            installed[pkg] = ver
    served = archive_versions(sorted(set(installed) | set(EXTRA_COPYRIGHT_PACKAGES)))
    candidates: dict[str, tuple[str, bytes]] = {}
    for pkg, ver in installed.items():
        path = Path(f"/usr/share/doc/{pkg}/copyright")
        if ver not in served.get(pkg, set()) or path.parent.is_symlink() or path.is_symlink() or not path.is_file():
            continue
        raw = path.read_bytes()
        if dpkg_md5(pkg, f"usr/share/doc/{pkg}/copyright") == hashlib.md5(raw).hexdigest():
            candidates[pkg] = (ver, raw)
    debs = work / "debs"
    debs.mkdir()
    extra = [p for p in EXTRA_COPYRIGHT_PACKAGES if p not in candidates and p in served]
    if extra:
        subprocess.run(["apt-get", "download", *extra], cwd=debs, check=True)
    for pkg in extra:
        root, ver = unpack_deb(pkg, debs, work)
        path = root / f"usr/share/doc/{pkg}/copyright"
        if path.parent.is_symlink() or path.is_symlink() or not path.is_file():
            continue
        candidates[pkg] = (ver, path.read_bytes())
    col = Collector("debian-copyright", tok)
    seen: set[str] = set()
    for pkg in sorted(candidates, key=order_key):
        if col.full():
            break
        ver, raw = candidates[pkg]
        text = normalise(raw.decode("utf-8", errors="replace")).strip("\n")
        h = sha256(text.encode())
        if h in seen or not (400 <= len(text) <= 120_000):
            continue
        if any(len(par) > MAX_STANZA_CHARS and (par.startswith("Files:") or par.count(". ") < len(par) / 1000)
               for par in re.split(r"\n[ \t]*\n", text)):
            continue  # has a huge file list or other non-prose block, not legal text
        seen.add(h)
        col.add(f"Debian package {pkg} {ver}: /usr/share/doc/{pkg}/copyright", text, {
            "package": pkg, "version": ver,
            "path": f"/usr/share/doc/{pkg}/copyright", "sha256_file": sha256(raw),
            "licence": dep5_licence(text),
        })
    return {
        "registry": "Debian bookworm (main)",
        "licence": "each member states its own package's licences (field 'licence': the License fields of a "
                   "machine-readable file); every package is in Debian main (DFSG-free) and ships the file",
        **col.write(),
    }


# --------------------------------------------------------------------------- GNU manuals


def read_info(root: Path, stem: str) -> tuple[str, list[str], list[bytes]]:
    """An Info manual as text: the main file before its indirect table, then its sub-files.

    The tag table (byte offsets for Info readers) is dropped; nothing else is.
    """
    info = root / "usr/share/info"
    main = info / f"{stem}.info.gz"
    raws = [gzip.decompress(main.read_bytes())]
    paths = [f"/usr/share/info/{stem}.info.gz"]
    text = raws[0].decode("utf-8", errors="replace")
    subs = []
    if "\x1f\nIndirect:\n" in text:
        text, _, rest = text.partition("\x1f\nIndirect:\n")
        subs = [line.split(":")[0] for line in rest.split("\x1f")[0].splitlines() if line.strip()]
    else:
        text = text.split("\x1f\nTag Table:\n")[0]
    for sub in subs:
        raw = gzip.decompress((info / f"{sub}.gz").read_bytes())
        raws.append(raw)
        paths.append(f"/usr/share/info/{sub}.gz")
        text += raw.decode("utf-8", errors="replace").split("\x1f\nTag Table:\n")[0]
    return normalise(text), paths, raws


# Manuals whose copying notice the heuristic below cannot name (read by hand).
INFO_LICENCE_OVERRIDES = {
    "gnupg": "GPL-3+ (the manual's own notice: copy/modify under the GNU GPL v3 or later)",
    "bc": "permissive verbatim-copying notice (debian/copyright, Files: doc/bc.texi)",
    "bzip2": "bzip2 BSD-variant licence (debian/copyright, Files: *)",
}


def info_licence(stem: str, text: str) -> str:
    if stem in INFO_LICENCE_OVERRIDES:
        return INFO_LICENCE_OVERRIDES[stem]
    head = text[:8000]
    if "public domain" in head.lower():
        return "public domain (manual's own notice)"
    m = re.search(r"GNU Free Documentation License,?\s+Version\s+([\d.]+)", head)
    if m:
        return f"GFDL-{m.group(1)} (as stated in the manual)"
    if "GNU FDL" in head:
        return "GFDL (as stated in the manual)"
    if "Permission is granted to make and distribute verbatim copies" in head:
        return "verbatim-copying permission notice (as stated in the manual)"
    return "see the manual's copying notice and the package's copyright file"


def gnu_manuals(tok, work: Path) -> dict:
    debs = work / "debs"
    debs.mkdir(exist_ok=True)
    col = Collector("gnu-manuals", tok)
    unpacked: dict[str, tuple[Path, str]] = {}
    for stem, pkg in GNU_MANUALS:
        if col.full():
            break
        if pkg not in unpacked:
            subprocess.run(["apt-get", "download", pkg], cwd=debs, check=True)
            unpacked[pkg] = unpack_deb(pkg, debs, work)
        root, ver = unpacked[pkg]
        text, paths, raws = read_info(root, stem)
        col.add(f"GNU manual: {stem}.info from Debian package {pkg} {ver}", text, {
            "package": pkg, "version": ver,
            "path": ", ".join(paths), "sha256_file": sha256(b"".join(raws)),
            "licence": info_licence(stem, text),
        })
    return {"registry": "Debian bookworm (main)", "licence": "per member", **col.write()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokenizer", default=os.path.expanduser("~/.cache/agentctx/models/gemma-3-270m-q4_k_m"))
    ap.add_argument("--only", choices=["oss-licenses", "debian-copyright", "gnu-manuals"])
    args = ap.parse_args()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    SOURCES.mkdir(exist_ok=True)
    manifest_path = SOURCES / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    jobs = {"oss-licenses": oss_licenses, "debian-copyright": debian_copyright, "gnu-manuals": gnu_manuals}
    with tempfile.TemporaryDirectory(prefix="selection-src-") as tmp:
        for fam, fn in jobs.items():
            if args.only and fam != args.only:
                continue
            work = Path(tmp) / fam
            work.mkdir()
            manifest[fam] = fn(tok, work)
            print(f"{fam}: {len(manifest[fam]['members'])} members, {manifest[fam]['chars']:,} chars, "
                  f"~{manifest[fam]['tokens_approx']:,} tokens")
    manifest_path.write_text(dump_manifest(manifest))


def dump_manifest(manifest: dict) -> str:
    """JSON with one line per member, so that diffs stay readable."""
    out = ["{"]
    fams = sorted(manifest)
    for k, fam in enumerate(fams):
        info = manifest[fam]
        out.append(f" {json.dumps(fam)}: {{")
        for key, val in info.items():
            if key != "members":
                out.append(f"  {json.dumps(key)}: {json.dumps(val, ensure_ascii=False)},")
        members = info.get("members", [])
        out.append('  "members": [')
        for j, m in enumerate(members):
            out.append("   " + json.dumps(m, ensure_ascii=False) + ("," if j < len(members) - 1 else ""))
        out.append("  ]")
        out.append(" }" + ("," if k < len(fams) - 1 else ""))
    out.append("}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
