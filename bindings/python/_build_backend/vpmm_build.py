"""A PEP 517 build backend for the vpmm package, standard library only.

The package is pure Python, so a wheel is a zip of its files plus the
.dist-info metadata (PEP 427, PEP 566); an sdist is a tar.gz of the tree.
Keeping this in-tree lets `pip install bindings/python` work offline on a
machine with nothing but python3 and pip (no setuptools, no wheel package).
Editable installs are not offered (PEP 660): point PYTHONPATH at
bindings/python instead."""
from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover - older Pythons read the few keys by hand
    tomllib = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"


def _project() -> Tuple[Dict[str, Any], List[str]]:
    path = os.path.join(ROOT, "pyproject.toml")
    if tomllib is not None:
        with open(path, "rb") as f:
            data = tomllib.load(f)
        return data["project"], data.get("tool", {}).get("vpmm-build", {}).get("packages", ["vpmm"])
    with open(path, encoding="utf-8") as f:
        text = f.read()
    get = lambda key: re.search(rf'^{key}\s*=\s*"([^"]*)"', text, re.M).group(1)  # noqa: E731
    return {"name": get("name"), "version": get("version"), "description": get("description"),
            "requires-python": get("requires-python")}, ["vpmm"]


def _dist_name(project: Dict[str, Any]) -> str:
    return re.sub(r"[-_.]+", "_", project["name"]).lower() + "-" + project["version"]


def _metadata(project: Dict[str, Any]) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}", f"Version: {project['version']}",
             f"Summary: {project.get('description', '')}",
             f"Requires-Python: {project.get('requires-python', '>=3.8')}"]
    for extra in project.get("optional-dependencies", {}):
        lines.append(f"Provides-Extra: {extra}")
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _package_files(packages: List[str]) -> List[str]:
    out = []
    for pkg in packages:
        for d, dirs, files in os.walk(os.path.join(ROOT, pkg)):
            dirs[:] = sorted(x for x in dirs if x != "__pycache__")
            for f in sorted(files):
                if f.endswith((".py", ".typed")):
                    out.append(os.path.relpath(os.path.join(d, f), ROOT))
    return out


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest},{len(data)}"


def _write_dist_info(dist_info_dir: str, project: Dict[str, Any]) -> Dict[str, bytes]:
    files = {
        f"{dist_info_dir}/METADATA": _metadata(project).encode(),
        f"{dist_info_dir}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: vpmm_build\n"
                                   f"Root-Is-Purelib: true\nTag: {TAG}\n").encode(),
        f"{dist_info_dir}/top_level.txt": b"vpmm\n",
    }
    return files


# --- PEP 517 hooks -----------------------------------------------------------
def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    """Nothing: the backend uses the standard library only."""
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    """Nothing: the backend uses the standard library only."""
    return []


def prepare_metadata_for_build_wheel(metadata_directory: str,
                                     config_settings: Optional[Dict[str, Any]] = None) -> str:
    """Write the .dist-info directory pip reads before building."""
    project, _ = _project()
    dist_info = _dist_name(project) + ".dist-info"
    for name, data in _write_dist_info(dist_info, project).items():
        path = os.path.join(metadata_directory, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
    return dist_info


def build_wheel(wheel_directory: str, config_settings: Optional[Dict[str, Any]] = None,
                metadata_directory: Optional[str] = None) -> str:
    """Build vpmm-VERSION-py3-none-any.whl into wheel_directory."""
    project, packages = _project()
    base = _dist_name(project)
    dist_info = base + ".dist-info"
    name = f"{base}-{TAG}.whl"
    entries: Dict[str, bytes] = {}
    for rel in _package_files(packages):
        with open(os.path.join(ROOT, rel), "rb") as f:
            entries[rel.replace(os.sep, "/")] = f.read()
    entries.update(_write_dist_info(dist_info, project))
    record = "".join(f"{n},{_record_hash(d)}\n" for n, d in entries.items()) + f"{dist_info}/RECORD,,\n"
    entries[f"{dist_info}/RECORD"] = record.encode()
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for n, d in entries.items():
            info = zipfile.ZipInfo(n, date_time=(1980, 1, 1, 0, 0, 0))  # reproducible
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, d)
    return name


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    """Build vpmm-VERSION.tar.gz: pyproject, README, the backend and the packages."""
    project, packages = _project()
    base = _dist_name(project)
    files = ["pyproject.toml", "README.md", os.path.join("_build_backend", "vpmm_build.py")]
    files += _package_files(packages)
    os.makedirs(sdist_directory, exist_ok=True)
    name = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz") as t:
        for rel in files:
            t.add(os.path.join(ROOT, rel), arcname=f"{base}/{rel}")
        pkg_info = _metadata(project).encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(pkg_info)
        t.addfile(ti, io.BytesIO(pkg_info))
    return name
