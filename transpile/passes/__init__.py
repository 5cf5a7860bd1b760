"""The transforming passes, in pipeline order (transpile/pipeline.py): resolve-constants,
specialize and kernel-headers on the syntax tree; lower (with lower_signature) into the lowered
IR; then the lowered IR's pipeline-copies and plan-fragments, and the planning passes
plan-shared (plan_shared.py), plan-alignment, plan-copies and plan-maps (plan_accesses.py;
plan-cpu-regions is transpile/cpu/region_plan.py's).
"""
