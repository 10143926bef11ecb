"""``paijob login NAME``: user + password -> a token stored in the cluster profile (0600)."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from paijob.errors import PaijobError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "login",
        help="log in to a cluster with user + password and store the token",
        description="Ask for your OpenPAI user and password, get a token from the cluster (POST "
                    "/authn/basic/login) and store it in the profile. Such tokens expire (7 days by "
                    "default); for scripts and CI prefer an application token with "
                    "`paijob cluster add NAME --url URL --token-env VAR`.",
    )
    parser.add_argument("name", metavar="NAME", help="cluster profile (created when --url is given)")
    parser.add_argument("--url", help="the cluster's web portal (to create the profile)")
    parser.add_argument("--user", help="user name (asked when not given)")
    parser.add_argument("--expiration", type=int, metavar="S", help="token lifetime in seconds")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from paijob import profiles
    from paijob.client import PaiClient

    data = profiles.load()
    entry = data["clusters"].get(args.name)
    if args.name == profiles.LOCAL:
        raise PaijobError("the local cluster needs no login: `-c local` uses its token automatically")
    url = args.url or (entry or {}).get("url")
    if not url:
        raise PaijobError(f"no cluster named {args.name!r}; pass --url to create it: "
                          f"`paijob login {args.name} --url https://...`")
    if entry is None or args.url:
        profiles.add(args.name, url, user=args.user or (entry or {}).get("user"))
    user = args.user or input(f"OpenPAI user for {url}: ").strip()
    password = getpass.getpass(f"password for {user}: ")
    client = PaiClient(url, None, cluster_name=args.name,
                       api_path=str((entry or {}).get("api_path") or "/rest-server/api/v2"))
    answer = client.login(user, password, args.expiration)
    token = answer.get("token")
    if not token:
        raise PaijobError(f"{url} answered the login without a token")
    path = profiles.store_token(args.name, str(token), str(answer.get("user") or user))
    print(f"logged in to {args.name} as {answer.get('user') or user}; token stored in {path} (mode 0600)")
    print("this token expires; for scripts, create an application token in the web portal and use "
          f"`paijob cluster add {args.name} --url {url} --token-env VAR`", file=sys.stderr)
    return 0
