"""`python -m tessera ...` is `tesserac ...` (tessera/cli)."""

from tessera.cli import main

main()
