"""``paijob login NAME``: user + password -> a token stored in the cluster profile (0600)."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from paijob.commands._common import seconds
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
    parser.add_argument("--password-stdin", action="store_true",
                        help="read the password from the first line of stdin (for scripts: "
                             "`paijob login NAME --user U --password-stdin < file`); otherwise it is asked "
                             "on the terminal")
    # Without it, `--password PW` was read as --password-stdin and PW echoed back as an unknown argument.
    parser.add_argument("--password", metavar="PASSWORD",
                        help="refused, with how to do it instead: a password typed here stays in your shell "
                             "history and shows in `ps`")
    parser.add_argument("--timeout", type=seconds, default=30.0, metavar="S",
                        help="the most seconds the login request may take (default 30)")
    parser.set_defaults(func=run)


class LoginInputError(PaijobError):
    """The user name or password cannot be asked for (no terminal) and was not given."""


def _interactive() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def ask_credentials(args: argparse.Namespace, url: str) -> tuple[str, str]:
    """(user, password) from the options, stdin (--password-stdin) or the terminal."""
    user = (args.user or "").strip()
    if args.password_stdin:
        if not user:
            raise LoginInputError("--password-stdin needs --user USER (stdin holds the password)")
        line = sys.stdin.readline() if sys.stdin is not None else ""
        password = line.rstrip("\r\n")
        if not password:
            raise LoginInputError("--password-stdin: stdin is empty; pipe the password in, e.g. "
                                  f"`paijob login {args.name} --user {user} --password-stdin < password-file`")
        return user, password
    if not _interactive():
        raise LoginInputError(
            "stdin is not a terminal, so the password cannot be asked for; pass it with --user USER "
            f"--password-stdin (`paijob login {args.name} --user USER --password-stdin < password-file`) "
            "or use an application token (`paijob cluster add NAME --url URL --token-env VAR`)")
    try:
        if not user:
            user = input(f"OpenPAI user for {url}: ").strip()
        password = getpass.getpass(f"password for {user}: ")
    except EOFError:
        raise LoginInputError("no user name or password given (end of input)") from None
    if not user or not password:
        raise LoginInputError("a user name and a password are needed")
    return user, password


def run(args: argparse.Namespace) -> int:
    from paijob import api

    if args.password is not None:
        raise LoginInputError("login --password: a password on the command line stays in your shell history and "
                              f"shows in `ps`; leave it out to be asked, or `paijob login {args.name} --user USER "
                              "--password-stdin < FILE` in scripts")
    url = api.login_url(args.name, args.url)
    user, password = ask_credentials(args, url)
    result = api.login(args.name, url, user, password, expiration=args.expiration,
                       timeout=getattr(args, "timeout", None) or 30.0)
    print(f"logged in to {args.name} as {result.user}; token stored in {result.path} (mode 0600)")
    if result.dropped_token_env:
        print(f"the profile read its token from ${result.dropped_token_env} before; it now uses the stored "
              "login token", file=sys.stderr)
    print("this token expires; for scripts, create an application token in the web portal and use "
          f"`paijob cluster add {args.name} --url {url} --token-env VAR`", file=sys.stderr)
    return 0
