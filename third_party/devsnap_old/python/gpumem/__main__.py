"""python -m gpumem ...: the same as the gpumem command."""
from gpumem._cli import main

main()
