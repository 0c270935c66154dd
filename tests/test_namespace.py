"""One namespace: everything installs as ``agentctx.*``; the bare name ``kernels`` stays Hugging Face's.

The checkout keeps its top-level folders (kernels/, serving/, ...), mapped onto ``agentctx.*`` by
pyproject.toml. A process with the checkout's root on sys.path (``python -m`` or ``-c`` from the
root, and every Ray worker of a driver started there: Ray puts the driver's working directory first
on its workers' sys.path) would find kernels/ under the bare name ``kernels``, which transformers
>= 5.25 imports for Hugging Face's ``kernels`` distribution; kernels/__init__.py hands that name over.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("agentctx", "common", "entrypoints", "kernels", "kv_store", "pipelines", "retrieval", "serving")


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_every_folder_is_a_subpackage_of_agentctx():
    import agentctx.kernels

    assert agentctx.kernels.__name__ == "agentctx.kernels"
    assert Path(agentctx.kernels.__file__).resolve() == REPO / "kernels" / "__init__.py"
    assert callable(agentctx.kernels.attend_selected)


def test_no_generic_name_is_importable_outside_the_checkout(tmp_path):
    code = (
        "import importlib.util, json\n"
        f"names = {[f for f in FOLDERS if f != 'agentctx']!r}\n"
        "found = {n: getattr(importlib.util.find_spec(n), 'origin', None) for n in names}\n"
        "print(json.dumps(found))\n"
    )
    proc = _python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    import json

    found = json.loads(proc.stdout)
    for name, origin in found.items():
        # None, or another distribution's module (a venv may live inside the checkout)
        assert origin is None or not Path(origin).resolve().is_relative_to(REPO / name), (name, origin)


def test_bare_kernels_from_the_checkout_root_is_never_ours():
    code = "import kernels\nprint(getattr(kernels, '__file__', None))\n"
    proc = _python(code, REPO)  # `-c` puts the working directory (the root) first on sys.path
    assert proc.returncode == 0, proc.stderr
    where = proc.stdout.strip()
    try:
        importlib.metadata.distribution("kernels")
        hub_installed = True
    except importlib.metadata.PackageNotFoundError:
        hub_installed = False
    if hub_installed:  # Hugging Face's distribution
        assert where != "None" and not Path(where).resolve().is_relative_to(REPO / "kernels"), where
    else:  # an empty namespace package, as the folder would be without its __init__.py
        assert where == "None", where


def test_transformers_and_sentence_transformers_import_from_the_checkout_root():
    pytest.importorskip("sentence_transformers")
    code = ("import transformers.integrations.hub_kernels, transformers.modeling_utils\n"
            "import sentence_transformers.util.kernels\n"
            "from transformers.utils import is_kernels_available\n"
            "print(is_kernels_available())\n")
    proc = _python(code, REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_a_wheel_holds_only_agentctx(tmp_path):
    src = tmp_path / "src"  # a copy: a build writes build/ and *.egg-info beside the sources
    for name in ("pyproject.toml", "README.md"):
        src.mkdir(exist_ok=True)
        shutil.copy(REPO / name, src / name)
    for folder in FOLDERS:
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("agentctx-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert tops == {"agentctx"}, tops
    for folder in FOLDERS[1:]:
        assert f"agentctx/{folder}/__init__.py" in names, folder
    assert "agentctx/samples/sample_contract.txt" in names


def test_the_gpu_path_imports_with_torch_triton_and_transformers_only(tmp_path):
    # The H200 image has torch, triton and transformers and nothing else of ours: the kernels, the
    # engine and the runner must import there (and agentctx/__init__.py must not pull anything in).
    code = (
        "import sys\n"
        "for m in ('ray', 'pydantic', 'faiss', 'redis', 'sentence_transformers', 'fastapi'):\n"
        "    sys.modules[m] = None  # importing any of them now fails\n"
        "import agentctx.kernels, agentctx.serving.engine, agentctx.serving.runner.model_runner\n"
        "import agentctx.serving.runner.static_query, agentctx.serving.config, agentctx.serving.engine.loop\n"
    )
    proc = _python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
