"""`python -m kernel_atlas`: the `atlas` command."""

from kernel_atlas.cli import main

main()
