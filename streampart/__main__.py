"""``python -m streampart``."""

from streampart.cli import main

main()
