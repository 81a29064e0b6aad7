"""The one boundary every input file passes (a config, a policy, a fleet file, a configz answer):
``documents`` reads and parses one document within limits, naming the file, the line and the
field of any problem; ``flow_depth`` measures how deep YAML flow collections nest before the
parser runs."""

from rollout.inputs.documents import (
    DEFAULT_LIMITS,
    PATH_ADVICE,
    Document,
    Limits,
    decode_input,
    format_loc,
    parse_document,
    read_input,
)

__all__ = ["DEFAULT_LIMITS", "PATH_ADVICE", "Document", "Limits", "decode_input", "format_loc", "parse_document",
           "read_input"]
