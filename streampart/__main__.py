"""``python -m streampart``."""

try:
    from streampart.cli import main
except ModuleNotFoundError as exc:  # a Python without streampart's dependencies (not its virtualenv)
    raise SystemExit(
        f"error: this Python ({exc.name} is missing) is not the one streampart is installed in: "
        "run `source .venv/bin/activate` in the streampart checkout (after `make demo`) first"
    ) from None

main()
