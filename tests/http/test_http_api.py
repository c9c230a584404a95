"""``actline serve --http`` for real: a subprocess with its node and embedded NATS, tokens
from ``actline creds http``, and a client made of urllib and http.client only
(``tests/http/serving.py``). One server for the module; each test a few requests."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest

from .serving import Event, Served

QUESTION = "How do the pricing tiers differ?"


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    home = tmp_path_factory.mktemp("http") / "home"
    served = Served(home, ACTLINE_MAX_ATTACHMENT_BYTES="2000")
    try:
        yield served
    finally:
        served.stop()


@pytest.fixture(scope="module")
def token(api: Served) -> str:
    return api.token("app")


@pytest.fixture(scope="module")
def finished(api: Served, token: str) -> tuple[dict[str, str], list[Event]]:
    """One turn submitted and streamed to its result: (the submit's answer, its events)."""
    answer = api.call("POST", "/v1/turns", token=token, body={"question": QUESTION})
    assert answer.status == 202, answer.body
    return answer.body, api.events(answer.body["events_url"], token)


def test_a_turn_streams_its_events_to_the_result_and_the_result_is_kept(
    api: Served, token: str, finished: tuple[dict[str, str], list[Event]]
) -> None:
    submitted, events = finished
    assert submitted["result_url"] == f"/v1/turns/{submitted['turn_id']}"
    names = [e.event for e in events]
    assert names[-1] == "result" and names.count("result") == 1
    assert {"delta", "progress"} <= set(names)
    assert [int(e.id) for e in events] == list(range(len(events)))
    assert events[0].data["turn_id"] == submitted["turn_id"]
    delta = next(e for e in events if e.event == "delta")
    assert delta.data["kind"] == "stream.delta" and "text" in delta.data
    result = events[-1].data
    assert (result["kind"], result["status"]) == ("turn.result", "completed")
    assert "tier" in result["answer"].lower()

    got = api.call("GET", submitted["result_url"], token=token)
    assert got.status == 200
    assert (got.body["turn_id"], got.body["answer"]) == (submitted["turn_id"], result["answer"])


def test_a_stream_resumes_after_last_event_id(
    api: Served, token: str, finished: tuple[dict[str, str], list[Event]]
) -> None:
    submitted, events = finished
    middle = len(events) // 2
    resumed = api.events(submitted["events_url"], token, last_event_id=str(middle))
    assert [e.id for e in resumed] == [e.id for e in events[middle + 1 :]]
    assert resumed[-1].event == "result"


def test_requests_without_a_good_token_are_refused_saying_why(api: Served) -> None:
    assert api.call("GET", "/v1/health").status == 200
    assert api.call("GET", "/openapi.json").body["openapi"].startswith("3.1")
    missing = api.call("GET", "/v1/conversations")
    assert (missing.status, missing.body["code"]) == (401, "token_missing")
    assert missing.headers["www-authenticate"].startswith("Bearer")
    wrong = api.call("GET", "/v1/conversations", token="alh_000000000000_nope")
    assert (wrong.status, wrong.body["code"]) == (401, "token_invalid")


def test_another_tenants_token_finds_nothing_of_the_first_tenant(
    api: Served, token: str, finished: tuple[dict[str, str], list[Event]]
) -> None:
    submitted, _ = finished
    other = api.token("outsider", "--prefix", "acme")
    for path in (submitted["result_url"], submitted["events_url"]):
        answer = api.call("GET", path, token=other)
        assert (answer.status, answer.body["code"]) == (404, "not_found"), answer.body
    cancel = api.call("POST", f"{submitted['result_url']}/cancel", token=other)
    assert cancel.status == 404
    late = api.call("POST", f"{submitted['result_url']}/followup", token=token, body={"text": "x"})
    assert (late.status, late.body["code"]) == (409, "turn_finished")
    deny = api.call("POST", f"{submitted['result_url']}/deny", token=token, body={})
    assert (deny.status, deny.body["code"]) == (403, "forbidden")
    assert "--approver" in deny.body["error"]


def test_a_revoked_token_is_refused_by_the_running_server(
    api: Served, finished: tuple[dict[str, str], list[Event]]
) -> None:
    doomed = api.token("doomed", "--approver")
    assert api.call("GET", "/v1/turns/t-unknown", token=doomed).status == 404
    deny = api.call("POST", f"{finished[0]['result_url']}/deny", token=doomed, body={})
    assert (deny.status, deny.body["code"]) == (409, "turn_finished"), deny.body
    done = api.creds("revoke", "doomed")
    assert done.returncode == 0, done.stderr
    refused = api.call("GET", "/v1/turns/t-unknown", token=doomed)
    assert (refused.status, refused.body["code"]) == (401, "token_revoked")


def test_bad_input_is_refused_naming_the_field(api: Served, token: str) -> None:
    def post(**kwargs: object) -> tuple[int, str, str]:
        answer = api.call("POST", "/v1/turns", token=token, **kwargs)  # type: ignore[arg-type]
        return answer.status, answer.body["code"], answer.body["error"]

    assert post(raw=b"{not json")[:2] == (400, "bad_json")
    status, code, error = post(body={"conversation_id": "c-1"})
    assert (status, code) == (400, "bad_input") and "'question'" in error
    assert post(body={"question": "q", "conversation_id": "has space"})[:2] == (400, "bad_id")
    assert post(body={"question": "q", "colour": "red"})[:2] == (400, "unknown_field")
    big = base64.b64encode(b"x" * 2001).decode()
    files = [{"name": "big.txt", "media_type": "text/plain", "data_base64": big}]
    status, code, error = post(body={"question": "q", "attachments": files})
    assert (status, code) == (400, "attachment_too_large") and "attachments[0]" in error
    files = [{"name": "a.txt", "data_base64": "***"}]
    assert "data_base64" in post(body={"question": "q", "attachments": files})[2]
    bad_path = api.call("GET", "/v1/turns/bad%20id", token=token)
    assert (bad_path.status, bad_path.body["code"]) == (400, "bad_id")


def test_a_conversation_is_listed_exported_and_forked(
    api: Served, token: str, finished: tuple[dict[str, str], list[Event]]
) -> None:
    cid = finished[0]["conversation_id"]
    listed = api.call("GET", "/v1/conversations", token=token)
    assert listed.status == 200, listed.body
    assert cid in [c["conversation_id"] for c in listed.body["conversations"]]
    exported = api.call("GET", f"/v1/conversations/{cid}/export?format=markdown", token=token)
    assert exported.status == 200 and QUESTION.encode() in exported.body
    fork = api.call(
        "POST", f"/v1/conversations/{cid}/fork", token=token, body={"at": 1, "title": "fork"}
    )
    assert fork.status == 201, fork.body
    new = fork.body["conversation_id"]
    assert new != cid
    got = api.call("GET", f"/v1/conversations/{new}", token=token)
    assert (got.status, got.body["title"]) == (200, "fork")
    unknown = api.call("GET", "/v1/conversations/c-nothing", token=token)
    assert (unknown.status, unknown.body["code"]) == (404, "not_found")
    no_at = api.call("POST", f"/v1/conversations/{cid}/fork", token=token, body={})
    assert no_at.status == 400 and "'at'" in no_at.body["error"]
