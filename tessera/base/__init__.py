"""The base layer: what every other layer shares and nothing of Tessera's own is imported by it.

errors (diagnostics, their rendering, the TesseraError family), dtypes (the scalar types), f32
(f32 rounding without NumPy), irnode (the frozen dataclasses of both IR levels), kernel_info (a
compiled kernel's launch metadata), options (the compile options, one frozen object), limits (the
input limits), tune_space (a kernel's @autotune search space as the caches keep it), package_dir
(where a package's shipped files are), version.
"""
