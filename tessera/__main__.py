"""`python -m tessera run FILE.tsr` runs a sample against NumPy; `python -m tessera cache info|clear`
manages the compile cache; anything else is `tesserac` (`python -m tessera FILE.tsr -o OUT.cu`)."""

import sys


def _main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["run"]:
        from tessera.runner import main

        sys.exit(main(argv[1:]))
    if argv[:1] == ["cache"]:
        from tessera.cache_cli import main

        sys.exit(main(argv[1:]))
    from tessera.cli import main

    main(argv)


_main()
