"""Packaging beyond the metadata in pyproject.toml: `build` also runs `build_engine`, which compiles
the CPU backend's engine when the package is installed, so that a first launch compiles only the
user's kernel (docs/architecture.md, "Building a kernel library")."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from setuptools import Command, setup
from setuptools.command.build import build

HOST = "tessera.runtime.host"


def _load_recipe() -> ModuleType:
    """runtime/host/recipe.py, loaded by its path: the build environment has neither Tessera nor
    its dependencies, so the package cannot be imported."""
    spec = importlib.util.spec_from_file_location("tessera_host_recipe",
                                                  Path(__file__).resolve().parent / "runtime" / "host" / "recipe.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


recipe = _load_recipe()


class build_engine(Command):
    """Compile runtime/host/engine.cpp and precompile the prelude (runtime/host/tessera_host.h) into
    the package's runtime/host/prebuilt/: in the source tree for an editable install, else into
    build_lib (and so into the wheel). Never fails the build: without a compiler, or when a compile
    or a write fails, it prints one line and the runtime compiles the engine on first use (and
    each kernel unit the prelude) instead."""

    description = "compile the CPU backend's engine and prelude for this machine's C++ compiler"
    user_options: list[tuple[str, str | None, str]] = []

    def initialize_options(self) -> None:
        self.build_lib: str | None = None
        self.editable_mode = False  # set by setuptools for an editable install

    def finalize_options(self) -> None:
        self.set_undefined_options("build_py", ("build_lib", "build_lib"))

    def _host(self) -> Path:
        """The host folder of the sources (runtime/host in the project)."""
        return Path(self.get_finalized_command("build_py").get_package_dir(HOST))

    def _prebuilt(self, editable: bool) -> Path:
        """The prebuilt folder: in the sources' host folder, or in build_lib's."""
        if editable:
            return self._host() / recipe.PREBUILT
        assert self.build_lib is not None
        return Path(self.build_lib, *HOST.split("."), recipe.PREBUILT)

    def run(self) -> None:
        print(recipe.install_engine(self._host(), self._prebuilt(self.editable_mode)))
        print(recipe.install_prelude(self._host(), self._prebuilt(self.editable_mode)))

    def get_source_files(self) -> list[str]:
        return [str(p) for p in recipe.host_sources(self._host())]

    def get_outputs(self) -> list[str]:
        return [str(self._prebuilt(False) / p.name) for p in self._written()]

    def get_output_mapping(self) -> dict[str, str]:
        """For an editable install, build_lib's name of each file written into the source tree."""
        if not self.editable_mode:
            return {}
        return {str(self._prebuilt(False) / p.name): str(p) for p in self._written()}

    def _written(self) -> list[Path]:
        """The prebuilt engine and precompiled prelude with their checksums, where they exist for
        this compiler and these sources."""
        try:
            cxx = recipe.find_cxx()
            folder = self._prebuilt(self.editable_mode)
            files = [*recipe.prebuilt_files(folder, recipe.engine_key(cxx, self._host())),
                     *recipe.prelude_files(folder, recipe.prelude_key(cxx, self._host()))]
        except (recipe.NoCompiler, OSError, ValueError):
            return []
        return [p for p in files if p.is_file()]


class build_with_engine(build):
    sub_commands = [*build.sub_commands, ("build_engine", None)]


if __name__ == "__main__":
    setup(cmdclass={"build": build_with_engine, "build_engine": build_engine})
