"""``python -m streampart.cli``."""

from streampart.cli import main

main()
