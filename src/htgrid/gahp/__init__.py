"""The Grid ASCII Helper Protocol: the codec, a server runtime and a client.

* `htgrid.gahp._codec`: lines and fields as pure functions (no I/O), re-exported here.
* `htgrid.gahp.server`: an asyncio GAHP server a GAHP type plugs its commands into.
* `htgrid.gahp.client`: the grid manager's side: spawn, handshake, requests, RESULTS.
* `htgrid.gahp.commands`: each protocol family's commands (blah, condor, ec2, azure):
  their requests and results as values both the grid manager and the servers use.
"""

from __future__ import annotations

from htgrid.gahp._clock import Clock, SystemClock, first_of
from htgrid.gahp._codec import (
    MAX_LINE_LENGTH,
    NULL,
    REQUEST_ID_MAX,
    GahpVersion,
    LineSplitter,
    Reply,
    ReplyCode,
    Request,
    Result,
    decode_fields,
    decode_reply,
    decode_request,
    decode_result,
    encode_line,
    encode_notification,
    encode_reply,
    encode_request,
    encode_result,
    encode_results,
    escape,
    is_notification,
    null,
    parse_request_id,
    unnull,
)
from htgrid.gahp._errors import (
    BadArguments,
    GahpError,
    GahpProtocolError,
    GahpRequestRefused,
    GahpServerExited,
    GahpTimeout,
    LocalGahpError,
)
from htgrid.gahp._streams import ByteReader, ByteWriter
from htgrid.gahp.client import GahpClient, RequestIds
from htgrid.gahp.server import Call, Command, Credentials, GahpServer

__all__ = [
    "MAX_LINE_LENGTH",
    "NULL",
    "REQUEST_ID_MAX",
    "BadArguments",
    "ByteReader",
    "ByteWriter",
    "Call",
    "Clock",
    "Command",
    "Credentials",
    "GahpClient",
    "GahpError",
    "GahpProtocolError",
    "GahpRequestRefused",
    "GahpServer",
    "GahpServerExited",
    "GahpTimeout",
    "GahpVersion",
    "LineSplitter",
    "LocalGahpError",
    "Reply",
    "ReplyCode",
    "Request",
    "RequestIds",
    "Result",
    "SystemClock",
    "decode_fields",
    "decode_reply",
    "decode_request",
    "decode_result",
    "encode_line",
    "encode_notification",
    "encode_reply",
    "encode_request",
    "encode_result",
    "encode_results",
    "escape",
    "first_of",
    "is_notification",
    "null",
    "parse_request_id",
    "unnull",
]
