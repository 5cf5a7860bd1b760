"""Names in the emitted C: user identifiers kept where safe, renamed where they would
collide with C++ keywords, CUDA names or the compiler's own `tsr_` prefix; kernel
variant names for sets of `const` parameter values and type bindings, made unique
(transpile/lir/cnames.py applies this to a lowered module)."""

from __future__ import annotations

import functools
import re

# C++ keywords, CUDA built-in names and device math functions a user name must not shadow.
CXX_KEYWORDS = frozenset("""
alignas alignof and and_eq asm auto bitand bitor bool break case catch char char8_t char16_t char32_t class
compl concept const consteval constexpr constinit const_cast continue co_await co_return co_yield decltype
default delete do double dynamic_cast else enum explicit export extern false float for friend goto if inline
int long mutable namespace new noexcept not not_eq nullptr operator or or_eq private protected public register
reinterpret_cast requires restrict return short signed sizeof static static_assert static_cast struct switch
template this thread_local throw true try typedef typeid typename union unsigned using virtual void volatile
wchar_t while xor xor_eq NULL main printf malloc free memcpy memset assert abs min max exp exp2 log log2 sqrt
rsqrt sin cos tanh erf floor ceil pow fma fabs threadIdx blockIdx blockDim gridDim warpSize dim3 uint3 float2
float4 int2 int4 uint2 uint4 half size_t ptrdiff_t uintptr_t intptr_t int8_t int16_t int32_t int64_t uint8_t
uint16_t uint32_t uint64_t acos acosf acosh acoshf asin asinf asinh asinhf atan atan2 atan2f atanf atanh
atanhf cbrt cbrtf ceilf copysign copysignf cosf cosh coshf cospi cospif cyl_bessel_i0 cyl_bessel_i1 erfc erfcf
erfcinv erfcinvf erfcx erfcxf erff erfinv erfinvf exp10 exp10f exp2f expf expm1 expm1f fabsf fdim fdimf
fdivide fdividef floorf fmaf fmax fmaxf fmin fminf fmod fmodf frexp frexpf hypot hypotf ilogb ilogbf isfinite
isinf isnan j0 j0f j1 j1f jn jnf ldexp ldexpf lgamma lgammaf llrint llrintf llround llroundf log10 log10f
log1p log1pf log2f logb logbf logf lrint lrintf lround lroundf modf modff nan nanf nearbyint nearbyintf
nextafter nextafterf norm norm3d norm3df norm4d norm4df normcdf normcdff normcdfinv normcdfinvf normf powf
rcbrt rcbrtf remainder remainderf remquo remquof rhypot rhypotf rint rintf rnorm rnorm3d rnorm3df rnorm4d
rnorm4df rnormf round roundf rsqrtf scalbln scalblnf scalbn scalbnf signbit sincos sincosf sincospi sincospif
sinf sinh sinhf sinpi sinpif sqrtf tan tanf tanhf tgamma tgammaf trunc truncf y0 y0f y1 y1f yn ynf llabs labs
div ldiv rand srand exit abort atoi atof strlen strcpy strcmp
""".split())


# Names the CPU backend's kernel library declares at global scope (runtime/host: CUDA's vector
# types and atomics, the `tsr` namespace, g++'s built-in `std`, the TESSERA_HOST macro) or links
# against (the C library functions its engine calls: an extern "C" kernel or a table of that name
# would capture the engine's calls).  NVRTC declares most of them too.  A user name must not bind
# to any of them; tests/runtime/host/test_host_names.py checks this list against the prelude and the engine.
_VECTOR_BASES = ("char", "uchar", "short", "ushort", "int", "uint", "long", "ulong", "longlong", "ulonglong",
                 "float", "double")
HOST_NAMES = frozenset(
    [f"{pre}{base}{n}" for base in _VECTOR_BASES for n in range(1, 5) for pre in ("", "make_")]
    + [f"atomic{op}{scope}" for op in ("Add", "Sub", "Exch", "Min", "Max", "And", "Or", "Xor", "CAS", "Inc", "Dec")
       for scope in ("", "_block", "_system")]
    + """
tsr std TESSERA_HOST nv_bfloat16 clock clock64 umin umax llmin llmax ullmin ullmax snprintf vsnprintf fprintf
fwrite fflush stdout stderr abort aligned_alloc calloc clock_gettime mmap mprotect munmap raise sched_yield
sigaction sigaddset sigaltstack sigdelset sigemptyset sigfillset sigismember strnlen syscall sysconf
pthread_atfork pthread_attr_destroy pthread_attr_init pthread_attr_setdetachstate pthread_attr_setstacksize
pthread_cond_broadcast pthread_cond_destroy pthread_cond_signal pthread_cond_wait
pthread_cond_init pthread_cond_timedwait pthread_create pthread_join pthread_kill pthread_mutex_destroy
pthread_mutex_init pthread_mutex_lock pthread_mutex_unlock pthread_once pthread_self pthread_sigmask
""".split())


def is_safe_c_name(name: str) -> bool:
    return not (name in CXX_KEYWORDS or name in HOST_NAMES or "__" in name or (name.startswith("_") and name[1:2].isupper())
                or name.lower().startswith("tsr_") or name.startswith("_"))


@functools.lru_cache(maxsize=4096)
def c_ident(name: str) -> str:
    """The C spelling of a user identifier (already matched [A-Za-z_][A-Za-z0-9_]*): kept when safe,
    else prefixed with `tsr_u_`, which no kept name can start with (so the mapping is one-to-one).
    A compiler-made buffer (`%colpart0`, passes/frag_scratch.py) is `tsr_colpart0`."""
    if name.startswith("%"):
        return "tsr_" + name[1:]
    return name if is_safe_c_name(name) else "tsr_u_" + name


def var_name(name: str) -> str:
    """The C name of a variable: compiler temporaries (`%stop_k`) are `tsr_stop_k`, user names are
    kept where safe (c_ident)."""
    return "tsr_" + name[1:] if name.startswith("%") else c_ident(name)


INLINED = "%inl"  # the prefix of an inlined device function's locals: `%inl3_t` (C: `tsr_inl3_t`)


def inlined_local(name: str, call: int) -> str:
    """The name of the local `name` of a device function inlined by the kernel's call number `call`
    (transpile/checks/device_calls.py InlineCalls): no source name can equal it."""
    return f"{INLINED}{call}_{name}"


def source_text(message: str) -> str:
    """A diagnostic's message with each inlined local named as the source spells it (`'%inl3_t'`: `'t'`)."""
    return re.sub(r"%inl\d+_", "", message) if INLINED in message else message


def _value_text(v: int | float | bool) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v) if v >= 0 else f"m{-v}"
    text = repr(float(v)).replace("-", "m").replace(".", "p").replace("+", "")
    return "".join(ch if ch.isalnum() else "_" for ch in text)


def variant_name(kernel: str, const_values: tuple[tuple[str, int | float | bool | str], ...]) -> str:
    """`matmul` with BM=64, BN=128 becomes `matmul_BM64_BN128` (stable: parameter order); a type
    parameter's binding (a type name) is set off by an underscore: `scale` with T=f16 is `scale_T_f16`."""
    base = c_ident(kernel)
    return base + "".join(f"_{k}_{v}" if isinstance(v, str) else f"_{k}{_value_text(v)}" for k, v in const_values)


def unique(base: str, taken: set[str]) -> str:
    """`base`, else `base_v2`, `base_v3`, ...: the first not in `taken` (which it joins)."""
    cname, n = base, 1
    while cname in taken:
        n += 1
        cname = f"{base}_v{n}"
    taken.add(cname)
    return cname


def global_names(consts: tuple[str, ...], tables: tuple[str, ...], functions: tuple[tuple[str, str, tuple], ...],
                 inner: frozenset[str]) -> dict[str, str]:
    """C names of everything at module level: constants, tables and functions keep their (safe) names;
    each function is (its name, the name its C name starts from, its const values and type bindings),
    and one with values gets a variant name made unique against every other name (a kernel literally
    named `k_A1` keeps its name, `k` with A=1 becomes `k_A1_v2`) and against `inner`, the C names the
    functions' bodies declare: a parameter named `lerp_T_f32` would hide that instance of `lerp`."""
    out: dict[str, str] = {}
    taken: set[str] = set(inner)
    for name in (*consts, *tables, *(f for f, _, values in functions if not values)):
        out[name] = c_ident(name)
        taken.add(out[name])
    for name, base, values in functions:
        if values:
            out[name] = unique(variant_name(base, values), taken)
    return out
