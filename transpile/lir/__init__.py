"""The lowered IR (nodes: what the GPU does, with explicit memory and conversions), its generic
walker and rebuilder (visit), the analyses any pass or printer may run on it (affine indices,
constant folding and values, hoisting, fragment layouts, the shared-memory layout, sign and
divisibility proofs), its text form (dump) and the verifier run between passes (verify).
"""
