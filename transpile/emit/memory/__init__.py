"""The statement printer's memory parts (transpile/emit/stmts.py and the printers it calls): the
declarations of arrays and of the function's shared memory (declarations), and the C of a view of
a tensor or array that a copy, a vector access, a fragment or a bulk copy reads or writes (views).
"""
