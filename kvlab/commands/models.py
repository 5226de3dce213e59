"""`kvlab models [list | prepare NAME|all | verify NAME|all]`."""

from __future__ import annotations

from kvlab.commands import add_command


def add_parser(subparsers) -> None:
    parser = add_command(
        subparsers, "models", "list, prepare or verify the bundled models", "kvlab models", "kvlab models prepare all"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    add_command(
        actions, "list", "list the bundled models and whether each is prepared (the default)", "kvlab models list"
    )
    prepare = add_command(
        actions, "prepare", "fetch, verify and convert a bundled model once", "kvlab models prepare smollm2"
    )
    prepare.add_argument("name", help="a bundled model name, or 'all'")
    verify = add_command(
        actions, "verify", "check every byte of a prepared model against its manifest", "kvlab models verify all"
    )
    verify.add_argument("name", help="a bundled model name, 'all', or a prepared model directory")
    parser.set_defaults(handler=handle, action="list")


def _names(name: str) -> list[str]:
    from kvlab import models

    if name == "all":
        return list(models.BUNDLED)
    return [name] if name not in models.BUNDLED else [models.bundled(name).name]


def handle(args) -> int:
    from kvlab import models

    if args.action == "prepare":
        names = list(models.BUNDLED) if args.name == "all" else [models.bundled(args.name).name]
        for name in names:
            print(models.prepare(name, warm_quanto=name == names[-1]))
        return 0
    if args.action == "verify":
        for name in _names(args.name):
            print(models.verify(name))
        return 0
    for row in models.describe():
        state = "prepared" if row["prepared"] else "not prepared (kvlab models prepare " + row["name"] + ")"
        print(f"{row['name']:<8} {row['title']:<22} {row['summary']}  [{state}]")
    return 0
