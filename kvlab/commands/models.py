"""`kvlab models [list | prepare NAME|all]`."""

from __future__ import annotations


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser("models", help="list or prepare the bundled models")
    actions = parser.add_subparsers(dest="action")
    actions.add_parser("list", help="list the bundled models (default)")
    prepare = actions.add_parser("prepare", help="fetch, verify and convert a bundled model once")
    prepare.add_argument("name", help="a bundled model name, or 'all'")
    parser.set_defaults(handler=handle, action="list")


def handle(args) -> int:
    from kvlab import models

    if args.action == "prepare":
        names = list(models.BUNDLED) if args.name == "all" else [models.bundled(args.name).name]
        for name in names:
            print(models.prepare(name, warm_quanto=name == names[-1]))
        return 0
    for row in models.describe():
        state = "prepared" if row["prepared"] else "not prepared (kvlab models prepare " + row["name"] + ")"
        print(f"{row['name']:<8} {row['title']:<22} {row['summary']}  [{state}]")
    return 0
