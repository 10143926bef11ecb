"""The request that submits a job, as data: what ``paijob submit`` sends is what ``--dry-run`` prints.

As in TorchX, where ``schedule(dryrun(app))`` is a run, one function
(``job_submission``) builds the typed request and both paths take it from
there: ``PaiClient.submit`` sends it, ``HttpRequest.text`` shows it. The
token never enters the object: ``Authorization`` holds ``Bearer ***`` and the
client's session supplies the real header when it sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MASKED = "***"
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
        return "\n".join(lines) + "\n" + body


def job_submission(api_base: str, job_yaml: str, *, token: bool, job: Any = None) -> HttpRequest:
    """``POST {api_base}/jobs`` with the job YAML; ``token``: whether the client sends a bearer token;
    ``job``: the YAML as the server reads it, when the caller has it (see ``HttpRequest.job``)."""
    headers = {"Content-Type": "text/yaml"}
    if token:
        headers[AUTHORIZATION] = f"Bearer {MASKED}"
    return HttpRequest("POST", api_base.rstrip("/") + "/jobs", headers, job_yaml, job)
