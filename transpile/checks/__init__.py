"""The checking passes over the syntax tree: the type checker (typecheck, module_check and the
checkers of expressions, memory, calls, fragments, arrays, map kernels and loops it is built
from), the cooperation check, constant ranges, generics, the call graph and the @autotune decorator.
"""
