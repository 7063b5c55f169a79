"""repro | run | list (filled in with the lab)."""


def register(sub) -> None:
    p = sub.add_parser("list", help="implementations and modes")
    p.set_defaults(handler=lambda args: 0)
