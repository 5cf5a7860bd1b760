"""The transforming passes, in pipeline order (transpile/pipeline.py): resolve-constants,
specialize and kernel-headers on the syntax tree; lower (with lower_signature) into the lowered
IR; then the lowered IR's pipeline-copies, plan-fragments and plan-shared.
"""
