"""The HTTP app's parts on their own, without a model: the error handlers and the four guard layers.

A real FastAPI app with a few routes that fail on purpose, wrapped by ``install_error_handlers`` and
``install_guards`` exactly as ``create_app`` wraps the API, driven through Starlette's TestClient.
The same behaviour against the real server and model is in test_service_limits.py; this file
covers what no real request reaches today (a ``SettingError`` or ``BackendError`` escaping a route)
and runs in well under a second.
"""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from fastapi import FastAPI  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from winnow.errors import BackendError, WinnowError  # noqa: E402
from winnow.service.guards import install_guards  # noqa: E402
from winnow.service.hosts import HostPolicy  # noqa: E402
from winnow.service.http_errors import field_path, install_error_handlers  # noqa: E402
from winnow.service.limits import invalid  # noqa: E402
from winnow.settings import SettingError  # noqa: E402

KEY = "parts-key"


class Body(BaseModel):
    question: str
    n: int = 1


def make_app(api_key: str = "", max_body_bytes: int = 1000) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)
    install_guards(app, api_key=api_key, max_body_bytes=max_body_bytes,
                   hosts=HostPolicy.for_bind("127.0.0.1"))

    @app.post("/v1/echo")
    async def echo(body: Body) -> dict[str, object]:
        return body.model_dump()

    failures = {"api": invalid("options.window", "window must be at least 2"),
                "setting": SettingError("judge_n", "judge_n must be a number"),
                "k": SettingError("k", "k must be at least 1"),
                "backend": BackendError("the server at :8081 did not answer"),
                "winnow": WinnowError("the index is gone"),
                "bug": RuntimeError("a bug")}

    @app.get("/v1/fail/{kind}")
    async def fail(kind: str) -> None:
        raise failures[kind]

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


@pytest.fixture(scope="module")
def http() -> TestClient:
    return TestClient(make_app(), base_url="http://127.0.0.1", raise_server_exceptions=False)


@pytest.mark.parametrize("kind,status,type_,field", [
    ("api", 422, "invalid_request", "options.window"),
    ("setting", 422, "invalid_request", "options.judge_n"),  # a setting other than N and k sits in options
    ("k", 422, "invalid_request", "k"),
    ("backend", 502, "backend_error", None),
    ("winnow", 500, "error", None),
    ("bug", 500, "internal_error", None),
])
def test_every_failure_has_the_one_error_shape(http, kind, status, type_, field):
    response = http.get(f"/v1/fail/{kind}")
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"type", "message", "field"} and error["message"]
    assert (error["type"], error["field"]) == (type_, field)


def test_validation_errors_name_the_field_and_broken_json_is_a_400(http):
    response = http.post("/v1/echo", json={"question": "x", "n": "many"})
    assert response.status_code == 422 and response.json()["error"]["field"] == "n"
    response = http.post("/v1/echo", content=b'{"question": ', headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "malformed_json"
    assert http.get("/v1/nothing").json()["error"]["type"] == "not_found"
    assert http.delete("/v1/echo").json()["error"]["type"] == "method_not_allowed"


def test_field_paths():
    assert field_path(("body", "documents", 3, "text")) == "documents[3].text"
    assert field_path(("body", "documents", 1, "str")) == "documents[1]"
    assert field_path(("body",)) == "body"


def test_each_guard_layer_in_order():
    """Host before key, key before body size, body size before the route; the form label is read as JSON."""
    http = TestClient(make_app(api_key=KEY, max_body_bytes=100), base_url="http://127.0.0.1")
    auth = {"Authorization": f"Bearer {KEY}"}
    big = b'{"question": "' + b"x" * 200 + b'"}'
    evil = http.post("/v1/echo", content=big, headers={"Host": "evil.example"})
    assert (evil.status_code, evil.json()["error"]["field"]) == (400, "Host")
    no_key = http.post("/v1/echo", content=big)
    assert (no_key.status_code, no_key.headers["www-authenticate"]) == (401, "Bearer")
    too_big = http.post("/v1/echo", content=big, headers=auth)
    assert (too_big.status_code, too_big.json()["error"]["field"]) == (413, "body")
    chunked = http.post("/v1/echo", content=iter([big[:50], big[50:]]), headers=auth)
    assert "content-length" not in chunked.request.headers and chunked.status_code == 413
    form = http.post("/v1/echo", content=b'{"question": "q", "n": 2}',
                     headers=dict(auth, **{"Content-Type": "application/x-www-form-urlencoded"}))
    assert form.json() == {"question": "q", "n": 2}
    assert http.get("/healthz").json() == {"status": "ok"}  # open without the key
    assert http.get("/docs").status_code == 401 and http.get("/docs", headers=auth).status_code == 200


def test_an_integer_of_thousands_of_digits_is_the_422_of_any_out_of_range_value():
    """Python will not convert an integer literal of over 4,300 digits; the API says which field it
    was, in the error shape of every other 422, not Python's message about sys.set_int_max_str_digits."""
    http = TestClient(make_app(max_body_bytes=100_000), base_url="http://127.0.0.1", raise_server_exceptions=False)
    for body, field in ((b'{"question": "x", "n": 1' + b"0" * 5000 + b"}", "n"),
                        (b'{"question": "x", "n": [2, -9' + b"9" * 5000 + b"]}", "n[1]")):
        response = http.post("/v1/echo", content=body, headers={"Content-Type": "application/json"})
        assert response.status_code == 422
        error = response.json()["error"]
        assert (error["type"], error["field"]) == ("invalid_request", field)
        assert error["message"].startswith(f"{field}: the number has 5,001 digits, out of range")
        assert "set_int_max_str_digits" not in error["message"] and "Exceeds the limit" not in error["message"]
