"""The transforming passes, in pipeline order (transpile/pipeline.py): resolve-constants,
specialize and kernel-headers on the syntax tree; lower (with lower_signature) into the lowered
IR; then the lowered IR's pipeline-copies and plan-fragments, and the planning passes
plan-alignment, plan-copies and plan-maps (plan_accesses.py; plan-shared is lir/shared_layout.py's,
plan-cpu-regions transpile/cpu/region_plan.py's).
"""
