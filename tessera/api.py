"""The Python interface (spec section 11): `load`, `compile`, modules with one attribute per
kernel, and launches on the CPU backend (the CUDA backend shares the same interface).

A compiled variant (source, options, const values) is cached on disk as JSON metadata
plus the compiled library, so a warm start neither parses nor transpiles anything.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from tessera.base.errors import LaunchError, TesseraError
from tessera.base.forksafe import ForkSafeLock
from tessera.base.kernel_info import KernelInfo
from tessera.base.options import CompileOptions, check_arch, check_text
from tessera.base.tune_space import TuneSpace
from tessera.runtime.backends import AUTO, NAMES, Library
from tessera.runtime.backends import backend as find_backend
from tessera.variant import Variant, get_variant, variant_spec

if TYPE_CHECKING:
    from tessera.transpile.driver import FrontEnd

BACKENDS = ("auto", *NAMES)
MAX_REPEAT = 1_000_000  # launches one Kernel.benchmark may time


class NoKernelError(TesseraError, AttributeError):
    """A module has no kernel of the name asked for (`mod.nope`, `mod["nope"]`); an AttributeError
    too, so that `hasattr(mod, "nope")` is False."""


def select_backend(requested: str) -> tuple[str, str]:
    """(backend, reason). `TESSERA_BACKEND` overrides the request."""
    env = os.environ.get("TESSERA_BACKEND", "").strip().lower()
    choice = env or requested
    if choice not in BACKENDS:
        where = "TESSERA_BACKEND" if env else "backend="
        raise TesseraError(f"{where} must be one of {', '.join(BACKENDS)}, not {choice!r}")
    if choice != "auto":
        ok, why = find_backend(choice).status()
        if not ok:
            where = f"TESSERA_BACKEND={choice}" if env else f"backend={choice!r}"
            raise TesseraError(f"{where} is not available: {why}")
        return choice, why
    missing = ""  # why the preferred backends are not available
    for name in AUTO:
        ok, why = find_backend(name).status()
        if ok:
            return name, f"{missing}; using the {name.upper()} backend" if missing else why
        missing = missing or why
    raise TesseraError(f"no backend is available: {missing}")


class Module:
    """A loaded .tsr module: `mod.name` or `mod["name"]` is a kernel."""

    def __init__(self, source: bytes, path: str, backend: str, arch: str | None, options: CompileOptions) -> None:
        self.path = check_text("path=", path)
        self.backend, self.backend_reason = select_backend(backend)
        self.runs_on = find_backend(self.backend)
        if arch is None:
            arch = self.runs_on.arch()
        self.options = options.replace(arch=arch or "sm_90")
        self._source = source
        self._front: FrontEnd | None = None
        self._lock = ForkSafeLock()
        self._variants: dict[tuple, Variant] = {}
        default = self.variant(None, {})
        self._names: tuple[str, ...] = default.names
        self._consts: dict[str, tuple[str, ...]] = default.consts
        self._types: dict[str, dict[str, list]] = default.types  # kernels with type parameters
        self._spaces: dict[str, TuneSpace] = default.spaces  # kernels with @autotune: their search space
        self._plain: dict[str, tuple[Variant, KernelInfo]] = {}  # kernels with one variant: it, its info
        self._kernels: dict[str, Kernel] = {}  # one Kernel per name (it keeps its direct launcher)

    @property
    def source(self) -> bytes:
        """The source as it was read."""
        return self._source

    @property
    def arch(self) -> str:
        return self.options.arch

    @property
    def debug(self) -> bool:
        return self.options.debug

    @property
    def check_bounds(self) -> bool:
        return self.options.check_bounds

    @property
    def restrict(self) -> bool:
        return self.options.restrict

    def front_end(self) -> FrontEnd:
        """The source parsed and its constants resolved: once, on the first variant that is not in
        the cache, for every variant."""
        with self._lock:
            if self._front is None:
                from tessera.frontend.parser import decode_source
                from tessera.transpile.driver import front_end

                self._front = front_end(decode_source(self._source, self.path))
            return self._front

    def variant(self, kernel: str | None, consts: Mapping[str, Any], aligned: bool = False) -> Variant:
        """The compiled variant of `kernel` with these const values and type bindings (`kernel`
        None: every kernel with its defaults), generic or for 16-byte-aligned arrays."""
        key = (kernel, tuple(sorted(consts.items())), aligned)
        v = self._variants.get(key)
        if v is None:
            v = get_variant(variant_spec(self._source, self.backend, self.options, kernel, consts, aligned),
                            self.front_end)
            self._variants[key] = v
        return v

    def __getattr__(self, name: str) -> Kernel:
        if name.startswith("_"):
            raise AttributeError(name)
        kernel = self[name]
        self.__dict__[name] = kernel  # the next `mod.name` finds it without this call
        return kernel

    def __getitem__(self, name: str) -> Kernel:
        kernel = self._kernels.get(name) if isinstance(name, str) else None
        if kernel is not None:
            return kernel
        if not isinstance(name, str):
            raise TesseraError(f"module[name]: a kernel's name is a str, not {type(name).__name__}")
        if name not in self._names:
            raise NoKernelError(f"module {self.path!r} has no kernel {name!r} (kernels: {', '.join(self._names)})"[:400])
        kernel = self._kernels[name] = Kernel(self, name)
        return kernel

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(self._names))

    @property
    def kernels(self) -> tuple[str, ...]:
        return self._names


class PreparedLaunch(NamedTuple):
    """What a launch needs, checked and bound (`Kernel.prepare`): run it with
    `library.launch(info, bound, ...)` or time it with `library.benchmark(info, bound, ...)`."""

    library: Library
    info: KernelInfo
    bound: Any       # the bound arguments (runtime/launch_args.py)


class Kernel:
    """One kernel of a module; call it to launch: `k(x, out)`, `k(x, out, grid=8)`, `k[8](x, out)`."""

    def __init__(self, module: Module, name: str) -> None:
        self.module = module
        self.name = name
        # The direct launcher of a kernel with no const, type or tuned parameters, for launches with
        # `_direct_args` positional arguments (runtime/direct_args.py; None: not for this kernel).
        self._direct: Any = None
        self._direct_args = -1

    def __getitem__(self, grid: Any) -> functools.partial:
        return functools.partial(self.__call__, grid=grid)

    def __repr__(self) -> str:
        return f"<tessera kernel {self.name} from {self.module.path} on {self.module.backend}>"

    def info(self, **consts: Any) -> KernelInfo:
        """The launch metadata of a variant: const parameters and type parameters (`T="f16"`) by keyword."""
        plain = self.module._plain.get(self.name)
        if plain is not None and not consts:  # the variant launches use (as built: see build_or_fall_back)
            return plain[0].kernel(self.name)
        generic = self.module._types.get(self.name)
        types: dict[str, str] = {}
        if generic is not None:
            from tessera.runtime.launch_args import bind_types

            types = bind_types(self.name, generic, (), consts)
        return self.module.variant(self.name, {**_check_consts(self, consts), **types}).kernel(self.name)

    @property
    def tune_space(self) -> TuneSpace | None:
        """The kernel's `@autotune` search space (None without one)."""
        return self.module._spaces.get(self.name)

    def prepare(self, args: tuple, kwargs: dict[str, Any], *, grid: Any = None,
                tuned: bool = True) -> PreparedLaunch:
        """Everything a launch with these arguments needs, without launching: the library (built
        if it is not yet), the kernel's metadata and the checked, bound arguments. Const parameters
        come by keyword in `kwargs`. A kernel with `@autotune` gets its tuned constants (`tuned`;
        tessera/autotune), and a `grid` that is a function is called with the variant's constants."""
        from tessera.runtime.bind_plan import fast_bind

        if "tessera.dist.tensor" in sys.modules:
            args, kwargs = local_shards(args, kwargs)
        plain = self.module._plain.get(self.name)
        if plain is not None:  # no const, type or tuned parameters: one variant, known already
            variant, info = plain
            if callable(grid):
                grid = grid(dict(info.const_values))
            device_arrays = self.module.runs_on.device_arrays
            bound = fast_bind(info, args, kwargs, grid, device_ok=device_arrays)
            if info.align_tensors and aligned_launch(info, bound, device_arrays):
                variant = self.module.variant(self.name, {}, aligned=True)
                info = variant.kernel(self.name)
            return PreparedLaunch(variant.library(), info, bound)
        names = self.module._consts.get(self.name, ())
        generic = self.module._types.get(self.name)
        kwargs = dict(kwargs)
        types: dict[str, str] = {}
        if generic is not None:  # a generic kernel: one variant per binding of its type parameters
            from tessera.runtime.launch_args import bind_types

            types = bind_types(self.name, generic, args, kwargs)
        consts = _check_consts(self, {k: kwargs.pop(k) for k in list(kwargs) if k in names})
        consts.update(types)
        space = self.tune_space
        if tuned and space is not None:
            from tessera.autotune import launch_config

            consts.update(launch_config(self, space, args, kwargs, consts, grid))
        # A kernel with no const, type or tuned parameters is in the default variant (compiled by load),
        # with the C a variant of its own would have; that one would be transpiled again (10-15 ms).
        default = None if names or generic is not None or space is not None else self.module.variant(None, {})
        variant = (default if default is not None and any(k.name == self.name for k in default.kernels)
                   else self.module.variant(self.name, consts))
        info = variant.kernel(self.name)
        if callable(grid):
            grid = grid(dict(info.const_values))
        if not names and generic is None and space is None:
            self.module._plain[self.name] = (variant, info)
        device_arrays = self.module.runs_on.device_arrays
        bound = fast_bind(info, args, kwargs, grid, device_ok=device_arrays)
        if info.align_tensors and aligned_launch(info, bound, device_arrays):
            variant = self.module.variant(self.name, consts, aligned=True)
            info = variant.kernel(self.name)
        return PreparedLaunch(variant.library(), info, bound)

    def __call__(self, *args: Any, grid: Any = None, stream: Any = None, timeout: float | None = None,
                 **kwargs: Any) -> None:
        """Launch; `timeout` (seconds, CPU backend) cancels a launch that has not finished in time.
        A repeated launch of a kernel with no const, type or tuned parameters, with positional
        arguments, first tries its direct launcher, which launches or declines (anything unusual,
        any wrong argument, a distributed tensor); the usual way then checks, reports and launches."""
        direct = self._direct
        if direct is not None and self._direct_args == len(args) and not kwargs and timeout is None and \
                direct(args, grid, stream):
            return
        limit = None
        if timeout is not None:  # the CUDA backend never loads the CPU launcher
            from tessera.runtime.host.launch import check_timeout

            limit = check_timeout(timeout)
        lib, info, bound = self.prepare(args, kwargs, grid=grid)
        lib.launch(info, bound, stream=stream, check_bounds=self.module.check_bounds, timeout=limit)
        if self._direct_args != len(args) and not kwargs:
            plain = self.module._plain.get(self.name)
            if plain is not None:
                make = getattr(plain[0].library(), "direct", None)
                self._direct = make(plain[1], len(args), self.module.check_bounds) if make is not None else None
                self._direct_args = len(args)

    def benchmark(self, *args: Any, grid: Any = None, repeat: int = 20, **kwargs: Any) -> float:
        """Median milliseconds per launch (CUDA events on the GPU; wall time on the CPU backend).
        Launches `repeat` times (1 to MAX_REPEAT): mut arguments are updated each time."""
        if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
            raise LaunchError(f"{self.name}.benchmark(): repeat must be an int from 1 to {MAX_REPEAT}, not "
                              f"{repeat!r}"[:300])
        lib, info, bound = self.prepare(args, kwargs, grid=grid)
        return float(lib.benchmark(info, bound, repeat=repeat, warmup=self.module.runs_on.warmup))


def local_shards(args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
    """Distributed tensors replaced by this process's shards (`.local`): a launch with them runs
    SPMD, its shape symbols bound by the local shapes. tessera.dist is looked up, never imported:
    no dist tensor can exist before it is."""
    tensor_mod = sys.modules.get("tessera.dist.tensor")
    if tensor_mod is None:
        return args, kwargs
    dist_tensor = tensor_mod.DistTensor
    return (tuple(a.local if isinstance(a, dist_tensor) else a for a in args),
            {k: v.local if isinstance(v, dist_tensor) else v for k, v in kwargs.items()})


def aligned_launch(info: KernelInfo, bound: Any, uploaded: bool) -> bool:
    """Whether a launch may use the kernel's aligned variant: its copied tensors start on a
    16-byte boundary and the shape symbols its rows and strides need are multiples of 16. With
    `uploaded` (the CUDA backend), NumPy arrays are copied to fresh, aligned device allocations,
    except managed ones (tessera.managed_empty), used in place."""
    import numpy as np

    from tessera.runtime.managed import is_managed

    if any(bound.shapes.get(s, 0) % 16 for s in info.align_symbols):
        return False
    for name in info.align_tensors:
        a = bound.arrays[name]
        if uploaded and isinstance(a, np.ndarray) and not is_managed(a):
            continue  # copied to a fresh allocation
        if bound.address(name) % 16:
            return False
    return True


def _check_consts(k: Kernel, consts: dict[str, Any]) -> dict[str, Any]:
    """Const parameter values given at a launch: Python or NumPy scalars that fit 64 bits (the
    kernel's own range check, naming its type, comes with the compile)."""
    out = {}
    for name, v in consts.items():
        if hasattr(v, "item") and callable(v.item):
            v = v.item()
        if not isinstance(v, (bool, int, float)):
            raise LaunchError(f"{k.name}(): const parameter '{name}' must be an int, float or bool, not "
                              f"{type(v).__name__}")
        if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
            raise LaunchError(f"{k.name}(): const parameter '{name}' does not fit in 64 bits")
        if isinstance(v, float) and not math.isfinite(v):
            raise LaunchError(f"{k.name}(): const parameter '{name}' must be finite, not {v!r}")
        out[name] = v
    return out


def load(path: str | os.PathLike, backend: str = "auto", *, arch: str | None = None, debug: bool = False,
         check_bounds: bool = False, restrict: bool = True) -> Module:
    """Load a .tsr file. Compile errors raise `tessera.CompileError` with the diagnostics.
    `restrict=False` compiles the tensor parameters without __restrict__, so that a launch may
    pass overlapping arrays (by default that is a `LaunchError`)."""
    from tessera.base.limits import read_source

    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise TesseraError(f"path must be a str or an os.PathLike naming a file, not {type(path).__name__}")
    try:
        data = read_source(path)
    except OSError as e:
        raise TesseraError(f"cannot read {os.fspath(path)!r}: {e.strerror}") from None
    except ValueError:  # a NUL in the path
        raise TesseraError(f"cannot read {os.fspath(path)!r}: not a valid path") from None
    return Module(data, os.fspath(path), backend, check_arch(arch), _options(debug, check_bounds, restrict))


def compile(source: str, backend: str = "auto", *, arch: str | None = None, debug: bool = False,  # noqa: A001
            check_bounds: bool = False, restrict: bool = True, path: str = "<string>") -> Module:
    """Compile .tsr source text (see `load`)."""
    # A lone surrogate is kept, to be reported where it is as text that is not valid UTF-8.
    options = _options(debug, check_bounds, restrict)
    return Module(check_text("source", source).encode("utf-8", "surrogatepass"), path, backend, check_arch(arch),
                  options)


def _options(debug: Any, check_bounds: Any, restrict: Any) -> CompileOptions:
    return CompileOptions.checked(debug=debug, check_bounds=check_bounds, restrict=restrict)
