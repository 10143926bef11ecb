"""``paijob templates``: list the built-in job templates, or show one with its defaults."""

from __future__ import annotations

import argparse
import sys
from typing import Any

DESCRIPTION = """\
List the built-in job templates with a one-line description.
'paijob templates show NAME' prints the template, its documented default values
and the values schema they are checked against.

A template is NAME.yaml.j2 with its defaults in NAME.values.yaml and,
optionally, a JSON Schema for them in NAME.values.schema.json beside it.

What a template may do: every template, built-in or yours, renders in Jinja's
sandbox. It reads values; uses Jinja's tags, tests and filters; paijob's
filters yaml, yaml_block, sh (one shell word, quoted), shjoin (a list as
quoted words), shname (a shell variable name or an error), cli_flags; the
globals fail("message"), shm_mb(...), processes_per_node(...),
runtime_install_command(runtimeInstall), image_auth(imageCredentials),
paijob_version, rendered_version_env; and the methods
of plain values (list.append, dict.items, ...). It cannot reach Python
internals (cycler.__init__.__globals__ is an error), import modules, or read
files other than templates: include, import and extends read a template in
the template's own folder or under it, else a built-in by its bare name (e.g.
{% import "_job.yaml.j2" as job with context %}); an absolute name, '..' or a
link out of the folder is refused.
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "templates",
        help="list the built-in job templates; 'templates show NAME' prints one",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(func=list_templates)
    verbs = parser.add_subparsers(dest="templates_command", metavar="{list,show}")
    verbs.add_parser("list", help="list the built-in templates (the default)").set_defaults(
        func=list_templates
    )
    show = verbs.add_parser("show", help="print a template and its default values")
    show.add_argument("name", metavar="NAME", help="built-in name or path to a .yaml.j2 file")
    show.add_argument("--values", action="store_true",
                      help="list every value the template reads: type, default and comment")
    show.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"), default="table",
                      help="with --values: table (default), json or yaml")
    show.set_defaults(func=show_template)


def list_templates(args: argparse.Namespace) -> int:
    from paijob import api

    names = api.template_names()
    width = max((len(n) for n in names), default=0)
    for name in names:
        print(f"{name:<{width}}  {api.template(name).description()}")
    print("\nshow one: paijob templates show NAME; render: paijob render NAME --set key=value", file=sys.stderr)
    return 0


def show_template(args: argparse.Namespace) -> int:
    from paijob import api

    if args.values:
        return show_values(args)
    ref = api.template(args.name)
    print(f"# ---- template {ref.filename}")
    sys.stdout.write(ref.source())
    values = ref.values_text()
    if values is not None:
        text, filename = values
        print(f"\n# ---- default values {filename} (override with -f FILE or --set key=value)")
        sys.stdout.write(text)
    else:
        print("\n# ---- no default values file: every value the template uses must be given")
    schema = ref.schema_path()
    if schema is not None:
        print(f"\n# ---- values schema {schema.name} (values are checked against it before rendering)")
        sys.stdout.write(schema.read_text(encoding="utf-8"))
    return 0


def show_values(args: argparse.Namespace) -> int:
    import json

    from paijob import api
    from paijob.commands import _common as common

    docs = api.template_values(args.name)
    if common.print_data([{"name": d.name, "type": d.type, "default": d.default, "required": d.required,
                           "comment": d.comment} for d in docs], args.output):
        return 0
    rows = [["VALUE", "TYPE", "DEFAULT", "COMMENT"]]
    for doc in docs:
        default = "(required)" if doc.required else json.dumps(doc.default)
        rows.append([doc.name, doc.type, default, doc.comment])
    common.table(rows)
    return 0
