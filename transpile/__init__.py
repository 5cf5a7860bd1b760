"""Passes from the checked AST to CUDA C: constant folding, type checking, cooperative checks, shared-memory planning, lowering."""
