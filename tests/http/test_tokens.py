"""The HTTP API's token store: hashes only on disk, expiry, revocation seen by a reader
that keeps running, and names checked."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from actline.http.errors import BadInput, TokenRefused
from actline.http.tokens import FILE, TokenStore, digest


def refusal(store: TokenStore, token: str, now: float | None = None) -> str:
    with pytest.raises(TokenRefused) as caught:
        store.check(token, now)
    return caught.value.code


def test_the_store_keeps_the_hash_never_the_token(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    token, record = store.issue("billing", tenant="acme", approver=True, ttl_s=3600)
    text = (tmp_path / FILE).read_text()
    assert token not in text and token.split("_", 2)[2] not in text
    assert record.sha256 == digest(token) and record.sha256 in text
    assert stat.S_IMODE((tmp_path / FILE).stat().st_mode) == 0o600
    checked = store.check(token)
    assert (checked.name, checked.tenant, checked.role) == ("billing", "acme", "client+approver")
    assert record.expires - record.issued == 3600


def test_tokens_are_refused_saying_why(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    token, record = store.issue("app", tenant="al", ttl_s=60)
    assert refusal(store, "") == "token_missing"
    assert refusal(store, "Basic abc") == "token_invalid"
    assert refusal(store, token[:-1] + ("x" if token[-1] != "x" else "y")) == "token_invalid"
    assert refusal(store, f"alh_{record.id}_guessed") == "token_invalid"
    assert refusal(store, token, now=record.expires + 1) == "token_expired"


def test_a_revocation_by_another_process_counts_at_the_next_check(tmp_path: Path) -> None:
    server = TokenStore(tmp_path)  # the serving process: reads the file again when it changed
    token, record = TokenStore(tmp_path).issue("app", tenant="al")
    other, _ = TokenStore(tmp_path).issue("other", tenant="al")
    assert server.check(token).id == record.id
    assert [t.id for t in TokenStore(tmp_path).revoke("app")] == [record.id]
    assert refusal(server, token) == "token_revoked"
    assert server.check(other).name == "other"
    TokenStore(tmp_path).revoke_tenant("al")
    assert refusal(server, other) == "token_revoked"
    assert [t.state() for t in server.tokens()] == ["revoked", "revoked"]


def test_tokens_survive_a_new_store_on_the_same_folder(tmp_path: Path) -> None:
    token, _ = TokenStore(tmp_path).issue("app", tenant="al")
    assert TokenStore(tmp_path).check(token).name == "app"


def test_bad_names_tenants_and_unknown_revocations_are_refused(tmp_path: Path) -> None:
    store = TokenStore(tmp_path)
    with pytest.raises(BadInput, match="token name"):
        store.issue("two words", tenant="al")
    with pytest.raises(ValueError, match="tenant"):
        store.issue("app", tenant="Not_A_Tenant")
    with pytest.raises(BadInput, match="no valid HTTP token"):
        store.revoke("nobody")
    assert not (tmp_path / FILE).exists() or store.tokens() == []


def test_errors_pickle_with_their_fields() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(TokenRefused("token_revoked", "revoked")))
    assert (error.code, error.message, error.status) == ("token_revoked", "revoked", 401)


def test_actline_creds_issues_lists_and_revokes_http_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from actline.cli.main import main

    monkeypatch.delenv("NATS_URL", raising=False)
    monkeypatch.setenv("COLUMNS", "250")
    home = ["--home", str(tmp_path)]
    assert main(["creds", "http", "app", "--prefix", "acme", "--approver", *home]) == 0
    token = capsys.readouterr().out.strip()  # piped: the token alone
    out = tmp_path / "kept.token"
    assert main(["creds", "http", "other", "--ttl", "30d", "--out", str(out), *home]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    said = capsys.readouterr().out
    assert out.read_text().strip() not in said and "valid until" in said

    store = TokenStore(tmp_path / "auth")
    record = store.check(token)
    assert (record.tenant, record.role) == ("acme", "client+approver")
    assert store.check(out.read_text().strip()).expires - record.issued >= 30 * 86400 - 5
    assert main(["creds", "revoke", record.id, *home]) == 0
    assert main(["creds", "list", *home]) == 0
    listed = capsys.readouterr().out
    assert token not in listed
    rows = {line.split("│")[3].strip(): line for line in listed.splitlines() if "client" in line}
    assert "revoked" in rows["app"] and "client+approver" in rows["app"]
    assert "valid" in rows["other"]
    assert main(["creds", "http", *home]) == 2  # no name: the error says how
    assert "actline creds http NAME" in capsys.readouterr().err
