"""``python -m tracescore.cli``: the same command line as the ``tracescore`` script."""

from . import main

main()
