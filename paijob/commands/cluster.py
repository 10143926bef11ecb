"""``paijob cluster add|list|remove|use``: cluster profiles (URL, user, where the token comes from)."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from paijob.commands import _common as common


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "cluster",
        help="manage cluster profiles (add, list, remove, use)",
        description="Cluster profiles live in $XDG_CONFIG_HOME/paijob/clusters.yaml (mode 0600). "
                    "PAI_CLUSTER_URL + PAI_TOKEN (+ PAI_USER) in the environment act as a profile when "
                    "no -c is given; 'local' is the built-in local cluster.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    add = actions.add_parser("add", help="add a cluster profile (--replace: replace one of that name)")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--url", required=True, help="the cluster's web portal, e.g. https://pai.example.com")
    add.add_argument("--token-env", metavar="VAR",
                     help="environment variable holding an application token (read at each use; "
                          "the token itself is not written to the file)")
    # Without it, argparse read `--token VALUE` as an abbreviation of --token-env and stored the token as a name.
    # Refused with how to do it instead (a token typed here stays in the shell history and shows in `ps`): kept
    # out of the usage and help, which list only what works.
    add.add_argument("--token", metavar="TOKEN", help=argparse.SUPPRESS)
    add.add_argument("--user", help="your OpenPAI user name (read from the token when it is a JWT)")
    add.add_argument("--api-path", default=None, help="REST path under the URL (default /rest-server/api/v2)")
    add.add_argument("--use", action="store_true", help="make it the default cluster")
    add.add_argument("--replace", action="store_true",
                     help="replace the profile of that name, if one is saved (without it, that is an error)")
    add.add_argument("--mount", metavar="STORAGE=PATH", action="append", default=[],
                     help="where this machine mounts an OpenPAI storage (NFS, SMB): `paijob cp` reads the output "
                          "folders of jobs with storage: STORAGE from PATH (repeatable)")
    add.set_defaults(func=run_add)
    listing = actions.add_parser("list", help="list the profiles (tokens are never shown)")
    common.add_output_option(listing)
    listing.set_defaults(func=run_list)
    remove = actions.add_parser("remove", help="remove a profile")
    remove.add_argument("name", metavar="NAME")
    remove.set_defaults(func=run_remove)
    use = actions.add_parser("use", help="make a profile (or 'local') the default")
    use.add_argument("name", metavar="NAME")
    use.set_defaults(func=run_use)
    parser.set_defaults(func=lambda args: (parser.print_help(sys.stderr), 2)[1])


def run_add(args: argparse.Namespace) -> int:
    from paijob import api

    if args.token is not None:
        variable = "PAI_TOKEN_" + "".join(c if c.isalnum() else "_" for c in args.name.upper())
        raise api.PaijobError(
            f"cluster add --token: a token typed on the command line stays in your shell history and shows in "
            f"`ps`; put it in an environment variable and name that: `read -rs {variable} && export {variable}`, "
            f"then `paijob cluster add {args.name} --url URL --token-env {variable}`; or `paijob login {args.name}`")
    default_before = next((row["name"] for row in api.clusters() if row["current"]), None)
    path, user = api.add_cluster(args.name, args.url, user=args.user, token_env=args.token_env,
                                 api_path=args.api_path, make_current=args.use,
                                 mounts=args.mount, replace=args.replace)  # checks --token-env is a name
    if args.token_env and not os.environ.get(args.token_env):
        print(f"paijob: warning: ${args.token_env} is not set now; export it before using {args.name}",
              file=sys.stderr)
    print(f"cluster {args.name} saved in {path}")
    default_now = next((row["name"] for row in api.clusters() if row["current"]), None)
    if not args.use and default_now == args.name and default_before != args.name:
        print(f"cluster {args.name} is now the default (the first one added): verbs without -c use it; "
              f"`paijob cluster use local` goes back to the local cluster", file=sys.stderr)
    if not args.token_env:
        print(f"no token yet: run `paijob login {args.name}`, or add it again with --token-env VAR", file=sys.stderr)
    if not user:
        print("no user name known yet: pass --user (needed for job ids user~name)", file=sys.stderr)
    return 0


def run_list(args: argparse.Namespace) -> int:
    from paijob import api

    rows = api.clusters()
    if common.print_data(rows, args.output):
        return 0
    table = [["", "NAME", "URL", "USER", "TOKEN"]]
    for row in rows:
        table.append(["*" if row["current"] else "", row["name"], str(row["url"]), row["user"] or "-", row["token"]])
    common.table(table)
    return 0


def run_remove(args: argparse.Namespace) -> int:
    from paijob import api

    api.remove_cluster(args.name)
    print(f"cluster {args.name} removed")
    return 0


def run_use(args: argparse.Namespace) -> int:
    from paijob import api

    api.use_cluster(args.name)
    print(f"default cluster: {args.name}")
    return 0
