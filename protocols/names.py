"""The rule for model names, checked before a name reaches the disk, the index or a log line.

A model name becomes a folder name (in the repository and in a load's private override
folder), a key of the model index and a field of log lines, so a name that could leave a
folder (``/``, ``\\``, ``.``, ``..``), that no file system accepts (NUL, over ``NAME_MAX``
bytes), or that could forge a log line or a header (CR, LF and every other character
``str.isprintable`` refuses) is refused as a client error wherever a name arrives. Names
starting with a dot are refused too: the repository never lists hidden folders as models.

A load request is checked by Triton's rule first (``check_load_name``, Triton 2.67's
repository manager, which checks loads only), so a client matching on Triton's words finds
them. Pure: no I/O.
"""

from __future__ import annotations

from inferd.protocols.errors import InvalidArgument

# The longest file name (in bytes) of the file systems a repository lives on (NAME_MAX).
MAX_NAME_BYTES = 255
# A refused name is quoted in the error, escaped and cut to this many characters.
_QUOTED_CHARS = 64


def model_name_problem(name: str) -> str:
    """Why ``name`` cannot be a model name, or ``""`` when it can."""
    if not name:
        return "it is empty"
    if name.startswith("."):
        return "it starts with '.'"
    if "/" in name or "\\" in name:
        return "it contains a path separator"
    if not name.isprintable():
        return "it contains a control or other non-printable character"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"it is longer than {MAX_NAME_BYTES} bytes"
    return ""


def check_model_name(name: str) -> str:
    """``name`` itself, or ``InvalidArgument`` saying why it is not a valid model name."""
    problem = model_name_problem(name)
    if problem:
        raise InvalidArgument(f"{quoted(name)} is not a valid model name: {problem}")
    return name


# The whitespace Triton trims from a name to load before checking it (C's isspace).
_TRITON_WHITESPACE = " \t\n\v\f\r"


def check_load_name(name: str) -> str:
    """``name`` itself, or ``InvalidArgument`` with Triton's words when Triton refuses to
    load it: blank once trimmed, or trimmed ``..`` or holding a ``/``; then the rule above."""
    trimmed = name.strip(_TRITON_WHITESPACE)
    if not trimmed:
        raise InvalidArgument("Model name cannot be empty. Please enter a valid name to deploy.")
    if trimmed == ".." or "/" in trimmed:
        raise InvalidArgument(f"invalid model name {quoted(name)}, model name must not contain "
                              "path traversal characters")
    return check_model_name(name)


def quoted(name: str) -> str:
    """``name`` as an error message may show it: escaped (no control character survives)
    and cut short."""
    shown = name if len(name) <= _QUOTED_CHARS else name[:_QUOTED_CHARS] + "..."
    return ascii(shown) if not shown.isprintable() else f"'{shown}'"
