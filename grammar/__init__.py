"""The Lark grammar of the .tsr language (tsr.lark); data only."""
