"""The `wgmma.mma_async` instructions a module uses, printed as device functions after the device
header (one per operand type, N, A source and B major-ness): an instruction's accumulator is N / 2
registers, one inline-assembly operand each, which no template of the header can spell. On the CPU
backend each function calls the emulation of device/wgmma.cuh.

    tsr_wgmma_f16_n128_ss_mn(float* d, const unsigned* a, unsigned long long da, const void* pa,
                             unsigned long long db, const void* pb, int tid, int line)
      -> wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, ..., %63}, %64, %65, p, 1, 1, 0, 1;
"""

from __future__ import annotations

from tessera.base.irnode import ir_node
from tessera.transpile.lir import nodes as L
from tessera.transpile.lir.frag_layout import MMA_KINDS
from tessera.transpile.lir.visit import statements


@ir_node
class WgmmaShape:
    elem: str     # f16 | bf16 | i8 | u8
    n: int        # the instruction's N
    a_regs: bool  # A from registers
    b_mn: bool    # B MN-major (B[K, N] in shared memory, transposed by the instruction)

    @property
    def name(self) -> str:
        return f"tsr_wgmma_{self.elem}_n{self.n}_{'rs' if self.a_regs else 'ss'}_{'mn' if self.b_mn else 'k'}"


_DEC = {"f16": "tsr_dec_f16", "bf16": "tsr_dec_bf16", "i8": "tsr_dec_s8", "u8": "tsr_dec_u8"}
_E = {"f16": 2, "bf16": 2, "i8": 4, "u8": 4}


def instruction_n(n: int) -> int:
    """The N of the instructions of an N-column tmma: all of it up to 256, else 256 at a time."""
    return n if n <= 256 else 256


def shapes(module: L.Module) -> tuple[WgmmaShape, ...]:
    """The instructions the wgmma kernels of `module` use, in a fixed order."""
    found: set[WgmmaShape] = set()
    for fn in module.functions:
        if not fn.wgmma:
            continue
        for s in statements(fn.body):
            if isinstance(s, L.Mma):
                a, acc = fn.buffer(s.a.buf), fn.buffer(s.acc)
                assert a is not None and acc is not None
                n = int(acc.shape[1].value)  # type: ignore[union-attr]
                found.add(WgmmaShape(a.elem.name, instruction_n(n), a.space == "frag", not s.trans_b))
    return tuple(sorted(found, key=lambda w: (w.elem, w.n, w.a_regs, w.b_mn)))


def functions(module: L.Module) -> str:
    """The C of every instruction `module` uses ("" when none)."""
    return "".join(_function(w) for w in shapes(module))


def _function(w: WgmmaShape) -> str:
    kind = MMA_KINDS[w.elem]
    integer = kind.acc == "i32"
    acc_t = "int" if integer else "float"
    count = w.n // 2
    regs = ", ".join(f"%{i}" for i in range(count))
    outs = ", ".join(f'"+{"r" if integer else "f"}"(d[{i}])' for i in range(count))
    shape = f"m64n{w.n}k{kind.k}.{'s32' if integer else 'f32'}.{kind.ptx}.{kind.ptx}"
    if w.a_regs:
        a_ops, ins = f"{{%{count}, %{count + 1}, %{count + 2}, %{count + 3}}}", \
            '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), '
        nxt = count + 4
    else:
        a_ops, ins, nxt = f"%{count}", '"l"(da), ', count + 1
    b_op, scale = f"%{nxt}", f"%{nxt + 1}"
    ins += '"l"(db), "r"(1)'
    if integer:
        tail = "p"
    else:
        tail = f"p, 1, 1, {int(w.b_mn)}" if w.a_regs else f"p, 1, 1, 0, {int(w.b_mn)}"
    host_acc = "long long" if integer else "float"
    host = (f"    {host_acc} acc[{count}];\n    for (int e = 0; e < {count}; ++e) acc[e] = d[e];\n"
            f"    tsr_wgmma_host<{host_acc}, {_E[w.elem]}, {w.n}, {kind.k}>(acc, {'a' if w.a_regs else 'nullptr'}, da, pa, "
            f"{str(w.b_mn).lower()}, db, pb, tid, line, {1 if w.elem in ('i8', 'u8') else 2}u, {_DEC[w.elem]});\n"
            f"    for (int e = 0; e < {count}; ++e) d[e] = "
            + ("(int)(unsigned)(unsigned long long)acc[e];\n" if integer else "acc[e];\n"))
    return (f"\n__device__ __forceinline__ void {w.name}({acc_t}* d, const unsigned* a, unsigned long long da, "
            f"const void* pa, unsigned long long db, const void* pb, int tid, int line) {{\n"
            "#if defined(TESSERA_HOST)\n" + host +
            "#else\n    (void)a, (void)da, (void)pa, (void)pb, (void)tid, (void)line;\n"
            f'    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, {scale}, 0;\\n"\n'
            f'                 "wgmma.mma_async.sync.aligned.{shape} {{{regs}}}, {a_ops}, {b_op}, {tail};\\n}}\\n"\n'
            f"                 : {outs}\n                 : {ins});\n"
            "#endif\n}\n")


__all__ = ["WgmmaShape", "functions", "instruction_n", "shapes"]
