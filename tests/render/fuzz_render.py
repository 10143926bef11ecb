"""By-hand fuzz of `paijob render` (issue 11's "done when"): N random inputs,
each run as a real `python -m paijob.cli render ...` process under a time
limit and an address-space limit, then a summary of exit codes, tracebacks,
hangs and memory kills (all of which must be 0 but the exit codes 0 and 2).

    .venv/bin/python tests/render/fuzz_render.py -n 1000 --seed 11 --json out.json

Not collected by pytest (the CI property tests are test_render_fuzz.py).
"""

from __future__ import annotations

import argparse
import collections
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_inputs import JUNK_KEYS, ROOT, VALUES, value_names, yaml_values_files  # noqa: E402

TEMPLATES = ["ddp", "apex", "horovod", "dataparallel", "spawn"]
MARKER = Path("/tmp/paijob-fuzz-pwned")
USER_TEMPLATES = {
    "self.yaml.j2": '{% extends "self.yaml.j2" %}\n',
    "escape.yaml.j2": "name: {{ cycler.__init__.__globals__.os.getcwd() }}\n",
    "mro.yaml.j2": "name: {{ ''.__class__.__mro__[1].__subclasses__() }}\n",
    "range.yaml.j2": "{% for i in range(10**9) %}x{% endfor %}\n",
    "badbytes.yaml.j2": b"name: \xff\xfe\n",
    "include.yaml.j2": '{% include "include.yaml.j2" %}\n',
}


def random_text(rng: random.Random) -> str:
    alphabet = "[]{}:,&*!|>-'\"#%@` \n\t$;()<>\\~.0123456789abcdefnulltrue\u00e9\u2028\x00"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))


def random_value(rng: random.Random) -> str:
    return rng.choice(VALUES) if rng.random() < 0.6 else random_text(rng)


def random_key(rng: random.Random, names: list[str]) -> str:
    roll = rng.random()
    if roll < 0.7:
        return rng.choice(names)
    if roll < 0.9:
        return rng.choice(JUNK_KEYS)
    return random_text(rng).replace("=", "") or "k"


def random_tree(rng: random.Random, names: list[str], depth: int = 0) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice([None, True, 0, -1, 4, 1.5, float("inf"), 10**30, "x", "a b; id", "", "no"])
    if roll < 0.75:
        return [random_tree(rng, names, depth + 1) for _ in range(rng.randint(0, 3))]
    return {random_key(rng, names): random_tree(rng, names, depth + 1) for _ in range(rng.randint(0, 3))}


def make_case(rng: random.Random, names: list[str], folder: Path, index: int) -> list[str]:
    import yaml

    template = rng.choice(TEMPLATES)
    argv = ["render", template]
    kind = rng.random()
    if kind < 0.05:
        name, text = rng.choice(sorted(USER_TEMPLATES.items()))
        path = folder / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
        argv = ["render", str(path)]
    elif kind < 0.35:
        path = folder / f"values-{index}.yaml"
        roll = rng.random()
        if roll < 0.3:
            path.write_text(rng.choice(yaml_values_files()), encoding="utf-8")
        elif roll < 0.6:
            tree = {random_key(rng, names): random_tree(rng, names) for _ in range(rng.randint(1, 5))}
            path.write_text(yaml.safe_dump(tree, allow_unicode=True), encoding="utf-8")
        elif roll < 0.85:
            lines = [f"{random_key(rng, names)}: {random_value(rng)}" for _ in range(rng.randint(1, 5))]
            path.write_text("\n".join(lines) + "\n", encoding="utf-8", errors="surrogatepass")
        else:
            path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(0, 60))))
        argv += ["-f", str(path)]
    for _ in range(rng.randint(0 if kind < 0.35 else 1, 4)):
        flag = rng.choice(["--set", "--set", "--set-string"])
        argv += [flag, f"{random_key(rng, names)}={random_value(rng)}"]
    if rng.random() < 0.1:
        argv += ["-o", "json"]
    elif rng.random() < 0.1:
        argv += ["--output-file", str(folder / f"out-{index}.yaml")]
    return [word.replace("\x00", "") for word in argv]  # a real argv cannot hold NUL


def limit_memory() -> None:
    limit = 2 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--timeout", type=float, default=10.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    names = value_names()
    codes: collections.Counter[int] = collections.Counter()
    bad: list[dict[str, object]] = []
    durations: list[float] = []
    MARKER.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for index in range(args.n):
            argv = make_case(rng, names, folder, index)
            start = time.perf_counter()
            try:
                done = subprocess.run(
                    [sys.executable, "-m", "paijob.cli", *argv],
                    cwd=ROOT, capture_output=True, timeout=args.timeout,
                    preexec_fn=limit_memory, env={"PATH": "/usr/bin:/bin", "PAIJOB_NO_TEMPLATE_CACHE": "1"},
                )
            except subprocess.TimeoutExpired:
                codes[-1] += 1
                bad.append({"argv": argv, "problem": "hang"})
                continue
            durations.append(time.perf_counter() - start)
            codes[done.returncode] += 1
            err = done.stderr.decode("utf-8", "replace")
            problem = None
            if b"Traceback" in done.stderr:
                problem = "traceback"
            elif done.returncode not in (0, 2):
                problem = f"exit {done.returncode}"
            elif done.returncode == 2 and not (
                err.startswith("paijob: error: ") or err.startswith("usage: ") or "\npaijob: error: " in err
            ):
                problem = "no error message"
            elif MARKER.exists():
                problem = "ran a command"
            if problem:
                bad.append({"argv": argv, "problem": problem, "stderr": err[-1500:]})
    summary = {
        "inputs": args.n,
        "exit_codes": {str(k): v for k, v in sorted(codes.items())},
        "tracebacks": sum(1 for b in bad if b["problem"] == "traceback"),
        "hangs": sum(1 for b in bad if b["problem"] == "hang"),
        "other_problems": sum(1 for b in bad if b["problem"] not in ("traceback", "hang")),
        "slowest_s": round(max(durations, default=0.0), 2),
        "median_s": round(sorted(durations)[len(durations) // 2], 3) if durations else None,
    }
    print(json.dumps(summary, indent=2))
    for case in bad[:20]:
        print(json.dumps(case)[:2000])
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "problems": bad}, indent=2))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
