"""`tesserac [compile] FILE.tsr`: the transpiler's command.

Exit status: 0 success, 1 the program has errors (diagnostics on standard error),
2 bad command line, 70 internal compiler error.
"""

from __future__ import annotations

import argparse
import os
import sys

from tessera.base.dtypes import SCALARS
from tessera.base.errors import CompileError, InternalCompilerError, TesseraError
from tessera.base.kernel_info import KernelInfo
from tessera.base.limits import MAX_NAME_CHARS
from tessera.base.options import ARCHS, CompileOptions
from tessera.base.version import VERSION
from tessera.cli.output import is_input, write_output
from tessera.transpile.consts import NAME_RE, parse_define_value
from tessera.transpile.pipeline import PASS_NAMES

EXIT_ERROR = 1
EXIT_ICE = 70


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tesserac",
        description="Transpile a .tsr kernel file to CUDA C (and optionally compile it with NVRTC).",
        epilog="`tesserac tune FILE --kernel K --shape M=...` judges a kernel's @autotune space "
               "(`tesserac tune --help`). Exit status: 0 success, 1 errors in the program, 2 bad command line, 70 internal compiler error.")
    p.add_argument("input", help="the .tsr source file")
    p.add_argument("-o", "--output", metavar="OUT",
                   help="where to write the result; '-' for standard output (default: INPUT with .cu, .ptx, "
                        ".cubin or .ir)")
    p.add_argument("--arch", default="sm_90", metavar="SM",
                   help=f"target architecture: {', '.join(ARCHS)} (default sm_90); limits shared memory and "
                        "selects the NVRTC target")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="set a module constant or a kernel's const parameter (an integer, float, True or False), or "
                        "bind a kernel's type parameter (-D T=f16); repeatable")
    p.add_argument("--emit", choices=("cuda", "cpu", "ir", "ptx", "cubin"), default="cuda",
                   help="what to write: CUDA C (default), the C++ unit the CPU backend compiles, the checked IR, "
                        "PTX or a cubin (both from NVRTC)")
    p.add_argument("--cpu-mode", choices=("regions", "fibers"),
                   help="with --emit cpu: the kernels in region mode where they allow it (the CPU backend's default) "
                        "or all in fiber mode (as TESSERA_CPU_REGIONS=0 runs them); default: as the CPU backend "
                        "would run them")
    p.add_argument("--check", action="store_true",
                   help="also compile the emitted CUDA C with NVRTC and report errors and warnings")
    p.add_argument("--info", action="store_true",
                   help="compile with NVRTC and print registers, shared memory and spills per kernel")
    p.add_argument("--kernel", metavar="NAME", help="emit only this kernel (and what it uses)")
    p.add_argument("--debug", action="store_true", help="compile tassert checks in")
    p.add_argument("--line-info", action="store_true", help="emit #line directives that point at the .tsr file")
    p.add_argument("--dump-after", metavar="PASS", choices=PASS_NAMES,
                   help=f"print the IR after a pass and stop; passes: {', '.join(PASS_NAMES)}")
    p.add_argument("--version", action="version", version=f"tesserac {VERSION}")
    return p


def parse_defines(items: list[str], prog_error) -> dict:
    out: dict[str, int | float | bool | str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not NAME_RE.fullmatch(name) or len(name) > MAX_NAME_CHARS:
            prog_error(f"-D expects NAME=VALUE with NAME an identifier of at most {MAX_NAME_CHARS} characters, "
                       f"got {_shown(item)}")
        if value.strip() in SCALARS:  # a type parameter's binding: -D T=f16
            out[name] = value.strip()
            continue
        try:
            out[name] = parse_define_value(value)
        except ValueError as e:
            prog_error(f"-D {name}: {_shown(value)} {e}")
    return out


def _shown(text: str) -> str:
    # A command-line value quoted in a message, cut short: it may be megabytes long.
    return repr(text) if len(text) <= 40 else repr(text[:37]) + "..."


def _output_path(args: argparse.Namespace) -> str:
    if args.output:
        return args.output
    if args.dump_after:
        return "-"
    return os.path.splitext(args.input)[0] + {"cuda": ".cu", "cpu": ".cpp", "ir": ".ir", "ptx": ".ptx",
                                              "cubin": ".cubin"}[args.emit]


def run(argv: list[str]) -> int:
    from tessera.transpile.driver import compile_source, load_source
    from tessera.transpile.emit.stmts import line_file_name
    from tessera.transpile.lir.dump import dump_any

    parser = build_parser()
    args = parser.parse_args(argv)
    if args.arch not in ARCHS:
        parser.error(f"--arch must be one of {', '.join(ARCHS)}, not {_shown(args.arch)}")
    defines = parse_defines(args.defines, parser.error)
    if args.cpu_mode is not None and args.emit != "cpu":
        parser.error("--cpu-mode goes with --emit cpu")
    out = _output_path(args)
    if out != "-" and is_input(args.input, out):
        parser.error(f"the output file {out!r} is the input file; choose another output with -o")
    try:
        src = load_source(args.input)
    except OSError as e:
        print(f"tesserac: error: cannot read {args.input!r}: {e.strerror}", file=sys.stderr)
        return EXIT_ERROR
    except CompileError as e:  # too large, not UTF-8, or a NUL byte
        print(e.text, file=sys.stderr)
        return EXIT_ERROR
    try:
        if args.dump_after:
            result = compile_source(src, CompileOptions(arch=args.arch), defines=defines, stop_after=args.dump_after)
            write_output(out, dump_any(result.module))
            return 0
        options = CompileOptions(arch=args.arch, debug=args.debug, line_info=args.line_info,
                                 cpu_regions=args.emit == "cpu" and _cpu_regions(args.cpu_mode))
        result = compile_source(src, options, defines=defines, only_kernel=args.kernel)
        kernels = result.kernels
        if args.kernel is not None and not kernels:
            names = ", ".join(k.name for k in result.module.kernels) or "none"
            print(f"tesserac: error: no kernel named {args.kernel!r} (kernels: {names})", file=sys.stderr)
            return EXIT_ERROR
        base = os.path.splitext(args.input)[0]
        if args.emit == "ir":
            write_output(out, dump_any(result.module))
        elif args.emit == "cuda":
            write_output(out, result.cuda)
        elif args.emit == "cpu":
            from tessera.runtime.host.library import unit_source

            write_output(out, unit_source(result.cuda, kernels))
        nv = None
        if args.emit in ("ptx", "cubin") or args.check or args.info:
            from tessera.runtime.cuda.nvrtc import compile_cuda

            nv = compile_cuda(result.cuda, name=line_file_name(os.path.basename(base) + ".cu"), arch=args.arch,
                              line_info=args.line_info)
            if args.emit == "ptx":
                write_output(out, nv.ptx)
            elif args.emit == "cubin":
                if nv.cubin is None:
                    print("tesserac: error: NVRTC produced no cubin for this architecture", file=sys.stderr)
                    return EXIT_ERROR
                write_output(out, nv.cubin)
            for w in nv.warnings:
                print(f"tesserac: warning: {w}", file=sys.stderr)
        if args.info and nv is not None:
            # The table goes to standard output, unless the emitted code does (-o -): then to standard error.
            table = sys.stderr if out == "-" else sys.stdout
            width = max([32, *(len(k.c_name) + 1 for k in kernels)])
            print(f"{'kernel':<{width}} {'registers':>9} {'shared':>8} {'spill st':>8} {'spill ld':>8} {'stack':>6}"
                  "  variant", file=table)
            for k in kernels:
                r = next((x for x in nv.kernels if x.name == k.c_name), None)
                if r is None:
                    continue
                shared = r.shared_bytes + k.dynamic_smem
                print(f"{k.c_name:<{width}} {r.registers:>9} {shared:>8} {r.spill_stores:>8} {r.spill_loads:>8} "
                      f"{r.stack_bytes:>6}  {_variant_text(k)}", file=table)
                for line in _fragment_lines(result.module, k):
                    print(f"    {line}", file=table)
                for tensor, box, swizzle in k.tensor_maps:
                    mode = f", {swizzle}-byte swizzle" if swizzle else ""
                    print(f"    bulk tensor copies (TMA) of {tensor}: box {'x'.join(map(str, box))}{mode}, a tensor "
                          "map built at launch", file=table)
                print(f"    CPU backend: {_cpu_mode_text(result.module, k, args.debug)}", file=table)
        elif args.check and nv is not None:
            print(f"tesserac: {args.input}: NVRTC compiled {len(kernels)} kernel(s) for {args.arch}"
                  + (f" with {len(nv.warnings)} warning(s)" if nv.warnings else ", no warnings"), file=sys.stderr)
        return 0
    except (CompileError, InternalCompilerError) as e:
        return compile_failure(e)
    except TesseraError as e:
        print(f"tesserac: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as e:
        print(f"tesserac: error: cannot write {out!r}: {e.strerror}", file=sys.stderr)
        return EXIT_ERROR


def _fragment_lines(module: object, k: KernelInfo) -> list[str]:
    """The tensor-core fragments of kernel `k` (its warp division, its operands' padding) and where
    its shared arrays live, for --info."""
    from tessera.transpile.lir import nodes as L
    from tessera.transpile.lir.frag_buffers import fragment_info
    from tessera.transpile.lir.shared_layout import shared_info

    if not isinstance(module, L.Module):
        return []
    fn = next((f for f in module.kernels if f.name == k.name), None)
    return [*fragment_info(fn), *shared_info(fn)] if fn is not None else []


def _cpu_regions(mode: str | None) -> bool:
    """Whether --emit cpu prints region mode: as --cpu-mode says, else as the CPU backend would."""
    if mode is not None:
        return mode == "regions"
    from tessera.runtime.backends import backend

    return backend("cpu").region_mode()


def _cpu_mode_text(module: object, k: KernelInfo, debug: bool) -> str:
    """How the CPU backend would run kernel `k` (transpile/cpu/regions.py), for --info."""
    from tessera.runtime.backends import backend
    from tessera.transpile.cpu.region_plan import fiber_reason
    from tessera.transpile.lir import nodes as L

    fn = next((f for f in module.kernels if f.name == k.name), None) if isinstance(module, L.Module) else None
    if fn is None:
        return "-"
    if not backend("cpu").region_mode():
        return "fiber mode (TESSERA_CPU_REGIONS=0)"
    why = fiber_reason(fn, CompileOptions(debug=debug))
    return "region mode (loops over tiles between barriers)" if why is None else f"fiber mode: {why}"


def _variant_text(k: KernelInfo) -> str:
    """Which alignment variant a kernel is, for --info."""
    if k.aligned:
        symbols = f"; {', '.join(k.align_symbols)} multiples of 16" if k.align_symbols else ""
        return f"aligned: {', '.join(k.align_tensors)} 16-byte aligned{symbols}"
    return "generic (any alignment)" if k.align_tensors else "-"


def compile_failure(e: CompileError | InternalCompilerError) -> int:
    """Print why a compile failed (the diagnostics, or our own bug) and return the exit status."""
    if isinstance(e, CompileError):
        print(e.text, file=sys.stderr)
        return EXIT_ERROR
    print(f"tesserac: internal compiler error: {e}\nPlease report this with the input file.", file=sys.stderr)
    return EXIT_ICE
