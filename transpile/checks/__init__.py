"""The checking passes over the syntax tree: the type checker (module_check drives typecheck's
FunctionChecker, a core that owns the scope and the walk and is composed of parts for expressions,
calls, device calls, memory builtins, fragments, array declarations, map kernels, loops and
assignments, with the builtins' rule table in rules), the cooperation check, constant ranges,
generics, the call graph and the @autotune decorator.
"""
