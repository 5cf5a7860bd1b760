"""What the runtime needs to launch an emitted kernel, and its JSON form for the caches.
Kept free of heavy imports: a warm start reads these from the cache without the compiler."""

from __future__ import annotations

import json
from dataclasses import asdict

from tessera.base.irnode import ir_node


@ir_node
class ParamInfo:
    name: str
    kind: str                         # tensor | scalar | shape
    dtype: str                        # .tsr scalar type name
    dims: tuple[int | str, ...] = ()  # tensors: ints and shape-symbol names ("grid_groups" too)
    mut: bool = False


@ir_node
class KernelInfo:
    """How to launch one emitted kernel: C parameters in order, group shape, shared memory."""

    name: str
    c_name: str
    params: tuple[ParamInfo, ...]
    tile: tuple[int, ...]
    dynamic_smem: int
    const_values: tuple[tuple[str, int | float | bool], ...]
    line: int
    # Tensor parameters are declared __restrict__: the launch refuses overlapping arrays
    # where one of them is mut (compile with restrict=False to allow aliasing).
    restrict: bool = True
    # Alignment variants (transpile/lir/copy_plan.py): a kernel whose copies are faster when the
    # `align_tensors` are 16-byte aligned and the `align_symbols` multiples of 16 has an aligned
    # variant (`aligned` True), which a launch picks when its arrays allow.
    aligned: bool = False
    align_tensors: tuple[str, ...] = ()
    align_symbols: tuple[str, ...] = ()
    # Map kernels (section 8): elements per tile and step (0: not a map kernel), and a tensor
    # whose size is the element count (the grid may be left out at launch).
    map_width: int = 0
    map_tensor: str = ""
    # Shared arrays sized at launch (after the `dynamic_smem` bytes of constant ones): per array,
    # its name, element size, dimensions (ints and integer parameter names) and row padding.
    smem_sized: tuple[tuple[str, int, tuple[int | str, ...], int], ...] = ()
    # CPU backend: the kernel runs in region mode (loops over tiles between barriers, no fiber
    # per tile; transpile/cpu/regions.py) rather than fiber mode.
    regions: bool = False
    # Map kernels: the tensors the map reads whose shape broadcasts to `map_tensor`'s (section 15);
    # the launch checks NumPy's broadcasting rule on their actual shapes.
    map_broadcast: tuple[str, ...] = ()
    # sm_90a (spec section 16): the tensor maps the kernel takes after its parameters, one per
    # tensor and box that bulk tensor copies move: (tensor, box extents outermost first, swizzle
    # in bytes, 0 for none). The runtime builds them at launch (cuTensorMapEncodeTiled).
    tensor_maps: tuple[tuple[str, tuple[int, ...], int], ...] = ()


def kernels_to_json(kernels: tuple[KernelInfo, ...]) -> str:
    return json.dumps([asdict(k) for k in kernels], sort_keys=True)


def kernels_from_json(text: str) -> tuple[KernelInfo, ...]:
    out = []
    for k in json.loads(text):
        params = tuple(ParamInfo(p["name"], p["kind"], p["dtype"], tuple(p["dims"]), bool(p["mut"]))
                       for p in k["params"])
        out.append(KernelInfo(k["name"], k["c_name"], params, tuple(k["tile"]), int(k["dynamic_smem"]),
                              tuple((str(n), v) for n, v in k["const_values"]), int(k["line"]),
                              bool(k.get("restrict", True)), bool(k.get("aligned", False)),
                              tuple(map(str, k.get("align_tensors", ()))), tuple(map(str, k.get("align_symbols", ()))),
                              int(k.get("map_width", 0)), str(k.get("map_tensor", "")),
                              tuple((str(n), int(size), tuple(d if isinstance(d, str) else int(d) for d in dims), int(pad))
                                    for n, size, dims, pad in k.get("smem_sized", ())),
                              bool(k.get("regions", False)), tuple(map(str, k.get("map_broadcast", ()))),
                              tuple((str(t), tuple(int(b) for b in box), int(sw))
                                    for t, box, sw in k.get("tensor_maps", ()))))
    return tuple(out)
