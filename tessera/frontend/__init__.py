"""The front end: .tsr text to the syntax tree (nodes, with its expressions in exprs), through the
Lark grammar (grammar/tsr.lark) with committed LALR tables (parse_tables, written by
parse_tables_gen), the root-first lexer and the tree builder (build_ir); dump prints a tree for
`--dump-after`.
Imports only the base layer.
"""
