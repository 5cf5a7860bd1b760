"""The compiler: a syntax tree (tessera.frontend) to CUDA C and kernel metadata.

driver (the entry points: front end once per source, then each variant), pipeline (the ordered
pass list), render (a lowered module laid out as the .cu file), and the tables every part shares:
builtins (the one builtin table), consts (constant values with the C semantics), names (C names).
Subpackages in pipeline order: checks, lir (the lowered IR and its analyses), passes, emit (C
printers), cpu (the CPU backend's region mode). Imports the base layer and the front end only.
"""
