"""The CPU backend: the C++ prelude and engine beside the Python that drives them: the build
recipe shared with setup.py (recipe), building kernel libraries (build, with the early kernel
unit of unit), loading and launching them (library, launch) and reporting what the host compiler
or a crashed launch says (diagnostics, frames).
"""
