"""A bridge client: what a tenant's pod does, for `estate verify` and the live tier.

It calls slurmrestd through its TLS front, checking the front's certificate against the
estate's CA, with a token and the user it claims (slurmrestd's X-SLURM-USER-NAME and
X-SLURM-USER-TOKEN headers). Run as a module it reads one request as JSON on standard
input (so a token never appears in argv) and prints the response as JSON:

    {"url": "https://10.62.0.11:6820", "ca": "/path/ca.crt", "token": "...",
     "user": "svc-inference", "method": "POST", "path": "/slurm/v0.0.38/job/submit",
     "body": {...}}
"""
from __future__ import annotations

import json
import ssl
import sys
import urllib.error
import urllib.request


def call(url: str, ca: str, token: str, user: str, method: str, path: str,
         body: dict | None = None, timeout: float = 30) -> tuple[int, dict]:
    """(HTTP status, the JSON answer) of one slurmrestd request."""
    ctx = ssl.create_default_context(cafile=ca)
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url.rstrip("/") + path, data=data, method=method, headers={
        "X-SLURM-USER-NAME": user, "X-SLURM-USER-TOKEN": token,
        "Content-Type": "application/json", "Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
            return resp.status, _json(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, _json(err.read())


def _json(raw: bytes) -> dict:
    try:
        out = json.loads(raw or b"{}")
    except ValueError:
        return {"raw": raw.decode(errors="replace")[:2000]}
    return out if isinstance(out, dict) else {"value": out}


def errors(answer: dict) -> list[str]:
    """slurmrestd's error texts in an answer, whatever the API version's shape."""
    out = []
    for e in answer.get("errors") or []:
        if isinstance(e, dict):
            out.append(" ".join(str(e.get(k, "")) for k in ("error", "description")
                                if e.get(k)).strip() or json.dumps(e))
    return out


def main() -> int:
    req = json.load(sys.stdin)
    try:
        status, answer = call(req["url"], req["ca"], req["token"], req["user"],
                              req.get("method", "GET"), req["path"], req.get("body"))
    except (OSError, ssl.SSLError) as exc:   # refused, reset, a certificate that fails
        json.dump({"status": None, "error": f"{type(exc).__name__}: {exc}"}, sys.stdout)
        return 0
    json.dump({"status": status, "answer": answer}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
