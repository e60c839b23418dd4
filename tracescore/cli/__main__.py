"""``python -m tracescore.cli``: the same command line as the ``tracescore`` script."""

from .commands import main

main()
