"""`tessera.ops`: operators written in `.tsr` and shipped with the package (contract section 17).

`tessera.ops.backward` holds the backward passes of matmul, softmax, layer_norm and rms_norm;
`tessera.ops.torch` registers the operators as PyTorch custom operators.
"""
