"""The OpenAPI description (protocols/kserve_http/openapi.json) against the KServe HTTP frontend's
route table, without a server: every form of every route is documented with the same methods, and
every documented path is a route with exactly the documented methods (first match wins, as
the frontend routes). Live responses are validated in tests/e2e/test_openapi.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from inferd.plugins.frontends.kserve_http import routes

DESCRIPTION = Path(
    routes.__file__).resolve().parents[3] / "protocols" / "kserve_http" / "openapi.json"
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head", "options", "trace")
# The value a concrete path gets for each capture group or bare segment of a route pattern.
SAMPLES = {"([^/]+)": "m1", "([0-9]+)": "7", "(live|ready)": None, "(system|cuda)": None,
           "[^/]+": "r1"}


def document() -> dict[str, object]:
    loaded: dict[str, object] = json.loads(DESCRIPTION.read_text(encoding="utf-8"))
    return loaded


def documented() -> dict[str, frozenset[str]]:
    paths = document()["paths"]
    assert isinstance(paths, dict)
    return {path: frozenset(m.upper() for m in item if m in HTTP_METHODS)
            for path, item in paths.items()}


def expansions(pattern: str) -> Iterator[str]:
    """Every concrete path a route pattern matches, one per form: each optional group
    present or absent, each alternative, each capture a sample value."""
    optional = re.search(r"\(\?:((?:[^()]|\([^()]*\))*)\)\?", pattern)
    if optional is not None:
        before, after = pattern[: optional.start()], pattern[optional.end():]
        yield from expansions(before + after)
        yield from expansions(before + optional.group(1) + after)
        return
    alternative = re.search(r"\((\w+(?:\|\w+)+)\)", pattern)
    if alternative is not None:
        for choice in alternative.group(1).split("|"):
            yield from expansions(pattern[: alternative.start()] + choice
                                  + pattern[alternative.end():])
        return
    for token, sample in SAMPLES.items():
        if sample is not None:
            pattern = pattern.replace(token, sample)
    assert not re.search(r"[()\[\]?*+|]", pattern.replace("\\.", "")), pattern
    yield pattern.replace("\\.", ".")


def template_regex(template: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(template)))


def concrete(template: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: "7" if m.group(1) == "version" else "x1", template)


def route_of(path: str) -> int | None:
    """The index in the route table of the route ``path`` reaches (first match wins)."""
    for index, (pattern, _, _) in enumerate(routes.ROUTE_TABLE):
        if re.fullmatch(pattern, path):
            return index
    return None


def methods(index: int) -> frozenset[str]:
    return frozenset(routes.ROUTE_TABLE[index][2])


def test_the_description_is_openapi_3_with_an_error_schema() -> None:
    doc = document()
    assert str(doc["openapi"]).startswith("3.")
    components = doc["components"]
    assert isinstance(components, dict)
    error = components["schemas"]["Error"]
    assert error["required"] == ["error"] and error["properties"]["error"]["type"] == "string"


def test_every_form_of_every_route_is_documented_with_its_methods() -> None:
    paths = documented()
    forms = 0
    for index, (pattern, _, handlers) in enumerate(routes.ROUTE_TABLE):
        for path in expansions(pattern):
            if route_of(path) != index:
                continue  # an earlier route takes this form (``/v2/models/stats``)
            forms += 1
            matching = [t for t in paths if template_regex(t).fullmatch(path)
                        and route_of(concrete(t)) == index]
            assert matching, f"{path} (route {pattern}) is not in {DESCRIPTION.name}"
            for template in matching:
                assert paths[template] == frozenset(handlers), (
                    f"{template}: documented {sorted(paths[template])}, "
                    f"served {sorted(handlers)}")
    assert forms >= len(routes.ROUTE_TABLE)


@pytest.mark.parametrize("template", sorted(documented()))
def test_every_documented_path_is_a_route_with_exactly_its_methods(template: str) -> None:
    index = route_of(concrete(template))
    assert index is not None, f"{template} is documented but not served"
    assert documented()[template] == methods(index)


def test_every_operation_documents_its_error_body() -> None:
    paths = document()["paths"]
    assert isinstance(paths, dict)
    for template, item in paths.items():
        for method, operation in item.items():
            if method not in HTTP_METHODS:
                continue
            errors = [code for code in operation["responses"] if code >= "4" and code != "400"
                      or (code == "400" and "/health/" not in template)]
            assert errors, f"{method.upper()} {template} documents no error response"
            for code in errors:
                assert operation["responses"][code]["$ref"].startswith("#/components/responses/E")
