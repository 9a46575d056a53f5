"""The OpenAPI 3.1 description of the API, made from the route table itself.

The daemon serves it at /v1/openapi.json; the repository publishes it as
docs/openapi.json, written by

    python -m htgrid.net._openapi > docs/openapi.json

(a test fails when the published file and the routes disagree).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from htgrid.net._sandbox_routes import MAX_OUTPUT_JOBS
from htgrid.net._wire import NDJSON

if TYPE_CHECKING:
    from htgrid.net.app import RouteSpec

__all__ = ["SCHEMAS", "openapi_document", "render"]

_AD: Final = {
    "type": "object",
    "description": 'A ClassAd in HTCondor\'s JSON form; expressions as "\\/Expr(...)\\/"',
}
_IDS: Final = {"type": "array", "items": {"type": "string", "pattern": r"^\d+\.\d+$"}}

_COUNTS: Final = {
    "type": "object",
    "description": "jobs by JobStatus",
    "additionalProperties": {"type": "integer"},
}

SCHEMAS: Final[dict[str, dict[str, Any]]] = {
    "Ad": _AD,
    "Ads": {"type": "object", "properties": {"jobs": {"type": "array", "items": _AD}}},
    "Jobs": {"type": "object", "properties": {"jobs": _IDS}},
    "Cluster": {"type": "object", "properties": {"cluster": {"type": "integer"}}},
    "Submitted": {
        "type": "object",
        "properties": {
            "cluster": {"type": "integer"},
            "jobs": _IDS,
            "procs": {"type": "integer", "description": "how many (a streamed submit)"},
        },
    },
    "Submit": {
        "type": "object",
        "required": ["cluster_ad", "procs"],
        "properties": {
            "cluster_ad": _AD,
            "procs": {"type": "array", "items": _AD, "description": "what differs per proc"},
        },
    },
    "Summary": {
        "type": "object",
        "properties": {
            "batches": {
                "type": "array",
                "description": "the matching jobs of each cluster, owner and JobBatchName",
                "items": {
                    "type": "object",
                    "properties": {
                        "cluster": {"type": "integer"},
                        "owner": {"type": "string"},
                        "batch_name": {"type": ["string", "null"]},
                        "qdate": {"type": ["integer", "null"]},
                        "total_submit_procs": {"type": "integer"},
                        "first_proc": {"type": "integer"},
                        "last_proc": {"type": "integer"},
                        "counts": _COUNTS,
                    },
                },
            },
            "owners": {
                "type": "object",
                "description": "every owner's jobs in the queue",
                "additionalProperties": _COUNTS,
            },
            "factories": {
                "type": "array",
                "description": "late materialization factories (max_materialize, max_idle)",
                "items": {
                    "type": "object",
                    "properties": {
                        "cluster": {"type": "integer"},
                        "owner": {"type": "string"},
                        "next_proc": {"type": "integer", "description": "JobMaterializeNextProcId"},
                        "total": {"type": "integer"},
                        "limit": {"type": ["integer", "null"]},
                        "max_idle": {"type": ["integer", "null"]},
                        "paused": {"type": "integer", "description": "JobMaterializePaused"},
                        "qdate": {"type": ["integer", "null"]},
                        "pause_reason": {
                            "type": "string",
                            "description": "JobMaterializePauseReason",
                        },
                    },
                },
            },
        },
    },
    "SubmitLine": {
        "description": (
            "a line of a streamed submit (application/x-ndjson): the cluster ad first, "
            "then procs (what differs per proc, numbered on from 0), then the number of "
            "procs sent; nothing is queued unless the end line comes. MAX_API_REQUEST_MB "
            "caps each line, and API_BODY_TIMEOUT runs from the last whole line"
        ),
        "oneOf": [
            {"type": "object", "required": ["cluster_ad"], "properties": {"cluster_ad": _AD}},
            {
                "type": "object",
                "required": ["procs"],
                "properties": {"procs": {"type": "array", "items": _AD}},
            },
            {"type": "object", "required": ["end"], "properties": {"end": {"type": "integer"}}},
        ],
    },
    "Selection": {
        "description": "exactly one way of naming jobs",
        "oneOf": [
            {"type": "object", "properties": {"ids": _IDS}, "required": ["ids"]},
            {"type": "object", "properties": {"cluster": {"type": "integer"}}},
            {"type": "object", "properties": {"constraint": {"type": "string"}}},
            {"type": "object", "properties": {"all": {"const": True}}},
        ],
    },
    "Act": {
        "type": "object",
        "required": ["action", "jobs"],
        "properties": {
            "action": {"enum": ["hold", "release", "remove", "removex"]},
            "jobs": {"$ref": "#/components/schemas/Selection"},
            "reason": {"type": "string"},
        },
    },
    "Edit": {
        "type": "object",
        "required": ["jobs", "attrs"],
        "properties": {
            "jobs": {"$ref": "#/components/schemas/Selection"},
            "attrs": {"type": "object", "additionalProperties": {"type": "string"}},
        },
    },
    "Proxy": {
        "type": "string",
        "format": "binary",
        "description": "an X.509 proxy file (PEM: the proxy's certificate first), at most 1 MiB",
    },
    "Tar": {
        "type": "string",
        "format": "binary",
        "description": (
            "a plain tar; member names relative, without '..'; files and directories only"
        ),
    },
    "Staged": {
        "type": "object",
        "properties": {
            "jobs": {
                "type": "object",
                "description": 'job id -> "ok", or the problem document of its refusal',
                "additionalProperties": {
                    "oneOf": [
                        {"type": "string", "enum": ["ok"]},
                        {"$ref": "#/components/schemas/Problem"},
                    ]
                },
            }
        },
    },
    "JobIds": {
        "type": "object",
        "required": ["jobs"],
        "properties": {"jobs": {**_IDS, "minItems": 1, "maxItems": MAX_OUTPUT_JOBS}},
    },
    "AnnexTokenRequest": {
        "type": "object",
        "required": ["annex"],
        "properties": {
            "annex": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9-]{0,50}$"},
            "lifetime": {"type": "number", "description": "seconds (or expires)"},
            "expires": {"type": "integer", "description": "epoch seconds: the lease's end"},
            "authz": {
                "type": "array",
                "items": {"type": "string"},
                "description": "ADVERTISE_STARTD only; anything more is refused (403)",
            },
            "identity": {"type": "string", "description": "NAME.annex@<trust domain> only"},
            "record": {
                "type": "object",
                "description": "where the annex is: the schedd records it for the master, "
                "which keeps its Annex ad current in this pool's collector",
                "properties": {
                    "cloud": {"type": "string", "enum": ["ec2", "azure"]},
                    "region": {"type": "string"},
                    "group": {"type": "string", "description": "Azure: the resource group"},
                },
            },
        },
    },
    "AnnexToken": {
        "type": "object",
        "properties": {
            "token": {"type": "string"},
            "identity": {"type": "string"},
            "authz": {"type": "array", "items": {"type": "string"}},
            "expires": {"type": "integer", "description": "epoch seconds"},
            "jti": {"type": "string"},
            "trust_domain": {"type": "string"},
            "ca": {"type": "string", "description": "the pool's CA certificate (PEM)"},
        },
    },
    "AnnexName": {
        "type": "object",
        "required": ["annex"],
        "properties": {"annex": {"type": "string"}},
    },
    "Revoked": {"type": "object", "properties": {"revoked": {"type": "integer"}}},
    "Leases": {
        "type": "object",
        "required": ["leases"],
        "properties": {
            "leases": {
                "type": "object",
                "description": 'job id ("cluster.proc") -> JobLeaseExpiration, epoch seconds',
                "additionalProperties": {"type": "integer", "minimum": 0},
            }
        },
    },
    "Quarantine": {
        "type": "object",
        "properties": {
            "quarantined": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "integer"},
                        "time": {"type": "integer", "description": "epoch seconds"},
                        "source": {"enum": ["jobs", "clusters", "changes"]},
                        "job": {"type": ["string", "null"], "description": "cluster.proc"},
                        "owner": {"type": ["string", "null"]},
                        "reason": {"type": "string"},
                    },
                },
            }
        },
    },
    "Health": {"type": "object"},
    "OpenAPI": {"type": "object"},
    "Problem": {
        "type": "object",
        "description": "RFC 9457; `error` names the htgrid exception class",
        "properties": {
            "type": {"type": "string"},
            "title": {"type": "string"},
            "status": {"type": "integer"},
            "detail": {"type": "string"},
            "error": {"type": "string"},
        },
    },
}

_PARAMS: Final = {
    "constraint": ("a ClassAd expression the jobs must satisfy", {"type": "string"}),
    "projection": ("attribute names, comma-separated", {"type": "string"}),
    "limit": ("at most this many jobs", {"type": "integer", "minimum": 0}),
    "batches": (
        "false: everyone's counts by owner alone, no batches or factories (for totals)",
        {"type": "boolean"},
    ),
}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


_MEDIA: Final = {"Tar": "application/x-tar", "Proxy": "application/x-pem-file"}


def _json(name: str, media: str | None = None) -> dict[str, Any]:
    media = media or _MEDIA.get(name, "application/json")
    return {"content": {media: {"schema": _ref(name)}}}


_TOO_LARGE: Final = {
    "body": "the upload is over the daemon's MAX_TRANSFER_INPUT_MB",
    "returns": "the output's files add up to over the daemon's MAX_TRANSFER_OUTPUT_MB",
    "json": "the request body is over the daemon's MAX_API_REQUEST_MB",
}


def _problem(description: str) -> dict[str, Any]:
    return {"description": description, **_json("Problem", "application/problem+json")}


def openapi_document(routes: Sequence[RouteSpec], version: str) -> dict[str, Any]:
    """The OpenAPI document listing every route."""
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        op: dict[str, Any] = {
            "operationId": route.name,
            "summary": route.summary,
            "responses": {
                str(route.status): {
                    "description": "done",
                    **_json(route.returns),
                },
                "default": _problem("an error"),
            },
        }
        if route.name == "query":  # with Accept: application/x-ndjson, a page a line
            page = {"type": "array", "items": _AD, "description": "a page of ads"}
            op["responses"][str(route.status)]["content"][NDJSON] = {"schema": page}
        if route.body == "Tar":
            op["responses"]["413"] = _problem(_TOO_LARGE["body"])
        elif route.returns == "Tar":
            op["responses"]["413"] = _problem(_TOO_LARGE["returns"])
        elif route.body is not None and route.body not in _MEDIA:
            op["responses"]["413"] = _problem(_TOO_LARGE["json"])
        parameters = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in re.findall(r"\{(\w+)\}", route.path)
        ]
        for name in route.params:
            text, schema = _PARAMS[name]
            parameters.append({"name": name, "in": "query", "description": text, "schema": schema})
        if parameters:
            op["parameters"] = parameters
        if route.body:
            op["requestBody"] = {"required": True, **_json(route.body)}
            if route.body == "Submit":
                op["requestBody"]["content"].update(_json("SubmitLine", NDJSON)["content"])
        paths.setdefault(route.path, {})[route.method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "htgrid job queue",
            "version": version,
            "description": (
                "The schedd's API: on a Unix socket, the caller is the peer's uid; over "
                "TLS, the subject of an IDTOKENS bearer token of the pool. A request whose "
                "headers take longer than API_HEADER_TIMEOUT, or whose body longer than "
                "API_BODY_TIMEOUT (and 1 s per KiB), is answered 408 and its connection "
                "closed."
            ),
        },
        "paths": paths,
        "components": {"schemas": SCHEMAS},
    }


def render(document: dict[str, Any]) -> str:
    """The document as the published file's text (stable: diffs show real changes)."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    # The app, whose routes the document describes, is above this module (it serves it).
    from htgrid.net.app import published_document

    sys.stdout.write(render(published_document()))
