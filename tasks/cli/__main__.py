"""``python -m tasks.cli``: the ``tool-boundary`` console script."""

from tasks.cli.main import main

main()
