"""``/openapi.json`` is valid OpenAPI 3.1 and describes every route the app serves.

``openapi-3.1.schema.json`` is the OpenAPI Initiative's schema of 3.1 documents
(OAI/OpenAPI-Specification, ``src/schemas/validation/schema.yaml`` of the 3.1 line, as
JSON); each Schema Object is also checked as a JSON Schema 2020-12 schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
from starlette.routing import Route

from actline.actors.configuration.settings import NodeSettings
from actline.http import Gateway, TokenStore, describe, make_app

SCHEMA = Path(__file__).with_name("openapi-3.1.schema.json")


def test_the_description_is_valid_openapi_3_1() -> None:
    document = json.loads(json.dumps(describe()))  # what the route sends: plain JSON
    validator = jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text()))
    errors = [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(document)]
    assert not errors, "\n".join(errors)
    for schema in document["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)  # raises naming the fault
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_every_route_of_the_app_is_described(tmp_path: Path) -> None:
    app = make_app(Gateway("nats://127.0.0.1:4222", None), TokenStore(tmp_path), NodeSettings())
    paths = describe()["paths"]
    served = {
        (route.path, method.lower())
        for route in app.routes
        if isinstance(route, Route)
        for method in route.methods or ()
        if method != "HEAD"
    }
    described = {(path, method) for path, ops in paths.items() for method in ops}
    assert served == described
    for path, ops in paths.items():
        for method, op in ops.items():
            open_route = path in ("/openapi.json", "/v1/health")
            assert (op.get("security") == []) == open_route, (path, method)
            if not open_route:
                assert "401" in op["responses"], (path, method)
