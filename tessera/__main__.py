"""`python -m tessera FILE.tsr ...` is `tesserac FILE.tsr ...`."""

from tessera.cli import main

main()
