"""`python -m tessera run FILE.tsr` runs a sample against NumPy; `python -m tessera cache info|clear`
manages the compile cache; anything else is `tesserac` (`python -m tessera FILE.tsr -o OUT.cu`)."""

import sys


def _main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["run"]:
        from tessera import runner

        sys.exit(runner.main(argv[1:]))
    if argv[:1] == ["cache"]:
        from tessera import cache_cli

        sys.exit(cache_cli.main(argv[1:]))
    from tessera import cli

    cli.main(argv)


_main()
