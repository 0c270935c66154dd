"""Our top-level `kernels` package shares its import name with Hugging Face's `kernels`
distribution (required by transformers >= 5.25). These tests pin the guard rails."""

import importlib.metadata

import pytest
from packaging.version import Version

import kernels


def test_asking_our_kernels_for_hub_kernels_names_says_what_is_wrong():
    with pytest.raises(ImportError, match=r"transformers < 5.25"):
        from kernels import CUDAProperties  # noqa: F401  (what transformers 5.25 imports)


def test_submodules_still_import_through_the_package():
    import sys

    sys.modules.pop("kernels.triton_tail", None)
    vars(kernels).pop("triton_tail", None)
    from kernels import triton_tail  # the import system asks the module's __getattr__ first

    assert triton_tail.__name__ == "kernels.triton_tail"


def test_missing_dunder_lookups_stay_attribute_errors():
    # getattr(module, "__version__", default) must keep working (transformers probes it).
    assert getattr(kernels, "__version__", "N/A") == "N/A"
    assert kernels.attend_selected is not None


def test_installed_transformers_does_not_need_hub_kernels():
    # If this fails, the environment was not built by scripts/setup.sh (constraints file).
    assert Version(importlib.metadata.version("transformers")) < Version("5.25")
