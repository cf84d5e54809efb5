"""`python -m cli`: the `goodput` command."""

from cli import main

main()
