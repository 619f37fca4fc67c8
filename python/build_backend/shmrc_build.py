"""shmrc's build backend: maturin's, except that building from source without Rust's
cargo on PATH fails at once, saying what to install.

maturin by itself would download and install a Rust toolchain (about 1.1 GB, through
`puccinialin`) without asking. `pip install shmrc` from PyPI takes a prebuilt wheel
and needs none of this; only a build from source (a clone, an sdist, a platform
without a wheel) comes here.
"""

from __future__ import annotations

import shutil
from typing import Any, Mapping

import maturin

NO_CARGO = (
    "building shmrc from source needs Rust's cargo (1.85 or later) on PATH, and none "
    "was found. Install Rust with https://rustup.rs (or your distribution's cargo "
    "package), then retry; or install a wheel built on a machine that has Rust "
    "(README.md, Install: `maturin build --release -m python/Cargo.toml`; `pip install "
    "shmrc` after the first release), which needs no Rust."
)


def _need_cargo() -> None:
    if shutil.which("cargo") is None:
        raise RuntimeError(NO_CARGO)


def get_requires_for_build_wheel(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _need_cargo()
    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _need_cargo()
    return maturin.get_requires_for_build_editable(config_settings)


def get_requires_for_build_sdist(config_settings: Mapping[str, Any] | None = None) -> list[str]:
    _need_cargo()
    return maturin.get_requires_for_build_sdist(config_settings)


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    _need_cargo()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(
    metadata_directory: str, config_settings: Mapping[str, Any] | None = None
) -> str:
    _need_cargo()
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def build_wheel(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _need_cargo()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(
    wheel_directory: str,
    config_settings: Mapping[str, Any] | None = None,
    metadata_directory: str | None = None,
) -> str:
    _need_cargo()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def build_sdist(sdist_directory: str, config_settings: Mapping[str, Any] | None = None) -> str:
    _need_cargo()
    return maturin.build_sdist(sdist_directory, config_settings)
