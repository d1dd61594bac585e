"""backend: the package's build backend: scikit-build-core, whose sdist also carries what the
extension is built from. In a checkout the extension builds libgpukv from the repository around
this package (../..); an sdist has no repository around it, so build_sdist stages this package
with those sources under _vendor/ (and LICENSE as a file, not the checkout's link) and makes the
sdist from the stage. Every other hook is scikit-build-core's own."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from scikit_build_core import build as _skbuild
from scikit_build_core.build import *  # noqa: F401,F403 (the PEP 517 and 660 hooks)

PACKAGE = Path(__file__).resolve().parent.parent
ROOT = PACKAGE.parent.parent
# What a client-only build of libgpukv reads (GKV_CLIENT_ONLY: the top-level CMakeLists.txt
# stops after client/).
VENDORED = ("CMakeLists.txt", "LICENSE", "cmake", "include", "common", "proto", "client")
SKIP = shutil.ignore_patterns("build*", "_vendor", "__pycache__", "*.egg-info", ".pytest_cache",
                              "dist", "python")


def build_sdist(sdist_directory, config_settings=None):
    if not (ROOT / "proto").is_dir():  # an sdist being rebuilt: it carries _vendor already
        return _skbuild.build_sdist(sdist_directory, config_settings)
    out = os.path.abspath(sdist_directory)
    with tempfile.TemporaryDirectory() as tmp:
        stage = Path(tmp) / "gpukv"
        shutil.copytree(PACKAGE, stage, ignore=shutil.ignore_patterns(
            "build*", "_vendor", "__pycache__", "*.egg-info", ".pytest_cache", "dist"))
        (stage / "LICENSE").unlink(missing_ok=True)
        shutil.copyfile(ROOT / "LICENSE", stage / "LICENSE")
        vendor = stage / "_vendor"
        vendor.mkdir()
        for name in VENDORED:
            src = ROOT / name
            if src.is_dir():
                shutil.copytree(src, vendor / name, ignore=SKIP)
            else:
                shutil.copyfile(src, vendor / name)
        cwd = os.getcwd()
        os.chdir(stage)
        try:
            return _skbuild.build_sdist(out, config_settings)
        finally:
            os.chdir(cwd)
