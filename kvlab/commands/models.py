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


def handle(args) -> int:
    from kvlab import models

    if args.action != "list":
        names = list(models.BUNDLED) if args.name == "all" else [args.name]
        for name in names:
            if args.action == "verify":
                print(models.verify(name))
            else:
                print(models.prepare(name, warm_quanto=name == names[-1]))
        return 0
    for spec in models.BUNDLED.values():
        state = "prepared" if spec.prepared else f"not prepared (kvlab models prepare {spec.name})"
        print(f"{spec.name:<8} {spec.title:<22} {spec.summary}  [{state}]")
    return 0
