"""`python -m aitp.cli`: the same as the `aitp` command."""

from aitp.cli import main

main()
