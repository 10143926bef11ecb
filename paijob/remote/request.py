"""The request that submits a job, as data: what ``paijob submit`` sends is what ``--dry-run`` prints.

As in TorchX, where ``schedule(dryrun(app))`` is a run, one function
(``job_submission``) builds the typed request and both paths take it from
there: ``PaiClient.submit`` sends it, ``HttpRequest.text`` shows it. The
token never enters the object: ``Authorization`` holds ``Bearer ***`` and the
client's session supplies the real header when it sends. ``text`` shows the job's
``secrets`` masked too (``******``, as rest-server shows a stored job's config): a
dry run is pasted into terminals, tickets and CI logs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

MASKED = "***"
SECRET_MASK = "******"  # rest-server's GET /jobs/{job}/config shows secrets so
_TOP_KEY = re.compile(r"^(?:secrets|'secrets'|\"secrets\")\s*:", re.MULTILINE)
AUTHORIZATION = "Authorization"


@dataclass(frozen=True)
class HttpRequest:
    """One HTTP request as it goes on the wire, with the token masked."""

    method: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: str = ""
    # the body as the server reads it (``jsyaml.load_job``), when whoever built the request has it:
    # the client then reads no text again. Never sent, never shown.
    job: Any = field(default=None, compare=False, repr=False)

    def wire_headers(self) -> dict[str, str]:
        """The headers to send: all but the masked ``Authorization`` (the session holds the real one)."""
        return {name: value for name, value in self.headers.items() if name != AUTHORIZATION}

    def text(self) -> str:
        """The request line and headers as ``#`` comments, then the body: a valid job YAML as a whole."""
        from paijob.remote.errors import hide_url_password

        lines = [f"# {self.method} {hide_url_password(self.url)}"] + [f"# {name}: {value}" for name, value in self.headers.items()]
        if AUTHORIZATION not in self.headers:
            lines.append(f"# {AUTHORIZATION}: (no token)")
        body = self.body if self.body.endswith("\n") else self.body + "\n"
        return "\n".join(lines) + "\n" + mask_secrets(body, self.job)


def _secret_values(job: Any, body: str) -> dict[str, Any]:
    if job is None:
        from paijob.openpai.jsyaml import YamlError, load_job

        try:
            job = load_job(body, "job").value
        except YamlError:
            return {}
    secrets = job.get("secrets") if isinstance(job, dict) else None
    return secrets if isinstance(secrets, dict) else {}


def mask_secrets(body: str, job: Any = None) -> str:
    """``body`` with the values of its top-level ``secrets`` shown as ``******`` (the keys kept).

    The block-style mapping the templates write is replaced as a whole; a ``secrets`` written
    otherwise has each secret value masked where it appears in the text.
    """
    secrets = _secret_values(job, body)
    if not secrets:
        return body
    found = _TOP_KEY.search(body)
    if found is not None:
        rest = body[found.end():]
        ends = re.search(r"^(?=[^\s#])", rest, re.MULTILINE)  # the next top-level line
        block = "".join(f"\n  {_key(name)}: '{SECRET_MASK}'" for name in secrets)
        return body[:found.start()] + "secrets:" + block + "\n" + (rest[ends.start():] if ends else "")
    for value in sorted({str(v) for v in secrets.values() if v is not None and len(str(v)) >= 4}, key=len,
                        reverse=True):
        body = body.replace(value, SECRET_MASK)
    return body


def _key(name: Any) -> str:
    import json

    text = str(name)
    return text if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", text) else json.dumps(text)


def job_submission(api_base: str, job_yaml: str, *, token: bool, job: Any = None) -> HttpRequest:
    """``POST {api_base}/jobs`` with the job YAML; ``token``: whether the client sends a bearer token;
    ``job``: the YAML as the server reads it, when the caller has it (see ``HttpRequest.job``)."""
    headers = {"Content-Type": "text/yaml"}
    if token:
        headers[AUTHORIZATION] = f"Bearer {MASKED}"
    return HttpRequest("POST", api_base.rstrip("/") + "/jobs", headers, job_yaml, job)
