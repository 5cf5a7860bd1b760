"""Rendering only the CPU backend needs: region mode, where the code between two barriers runs
as a loop over a group's tiles (regions, after the plan of region_plan), instead of one fiber
per tile.
"""
