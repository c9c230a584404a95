"""The knowledge space: ranking over examples/kb, snippets, safe ks: reads, refresh and errors."""

from __future__ import annotations

import logging
import os
import pickle
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.timeline.paths import format_path, parse_path
from actline.tools import (
    KNOWLEDGE_REASONS,
    KnowledgeError,
    KnowledgeSpace,
    RefreshCounts,
    ToolError,
)
from actline.tools.search.text import CHUNK_WORDS, SNIPPET_CHARS, tokenize

KB = Path(__file__).parents[3] / "examples" / "kb"

QUESTIONS = [
    ("How much does the Team tier cost?", "ks:pricing/tiers.md"),
    ("What is the default retention?", "ks:config/retention.md"),
    ("How do I rotate the signing key?", "ks:security/signing-keys.md"),
    ("What is the maximum message size?", "ks:limits/quotas.md"),
    ("Which port does the metrics endpoint listen on?", "ks:operations/monitoring.md"),
    ("What does error LR-1042 mean?", "ks:support/troubleshooting.md"),
    ("How do I verify a webhook signature?", "ks:integrations/webhooks.md"),
    ("What changed in version 3.2.1?", "ks:releases/3.2.1.md"),
    ("How many nodes are recommended for a cluster?", "ks:operations/clustering.md"),
    ("How do I restore from a backup?", "ks:operations/backup-restore.md"),
    ("What is the uptime SLA for Enterprise?", "ks:support/sla.md"),
    ("When is exactly-once delivery for Kafka planned?", "ks:roadmap.md"),
]


@pytest.fixture(scope="module")
def kb() -> KnowledgeSpace:
    return KnowledgeSpace(KB)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_the_example_knowledge_space_holds_thirty_documents(kb: KnowledgeSpace) -> None:
    stats = kb.stats()
    assert stats.documents == 30
    assert stats.chunks > stats.documents
    assert stats.skipped == 0
    assert stats.to_dict()["terms"] == stats.terms > 0


def test_a_pricing_question_ranks_the_pricing_doc_first(kb: KnowledgeSpace) -> None:
    hits = kb.search("How much does the Team tier cost?")
    assert hits[0].path == "ks:pricing/tiers.md"
    assert hits[0].title == "Pricing tiers"
    assert hits[0].url == "https://docs.lumen-relay.example/pricing/tiers"
    assert "$490" in hits[0].snippet


@pytest.mark.parametrize(("question", "path"), QUESTIONS)
def test_each_question_ranks_the_doc_that_answers_it_in_the_top_three(
    kb: KnowledgeSpace, question: str, path: str
) -> None:
    assert path in [hit.path for hit in kb.search(question, top_k=3)]


@pytest.mark.parametrize(("question", "path"), QUESTIONS)
def test_snippets_contain_query_terms_and_fit_the_limit(question: str, path: str) -> None:
    lexical = KnowledgeSpace(KB, embedder=None)  # a dense-only hit may share no query term
    for hit in lexical.search(question):
        assert 0 < len(hit.snippet) <= SNIPPET_CHARS
        assert set(tokenize(hit.snippet)) & set(tokenize(question)), hit


def test_hit_paths_are_ks_logical_paths_that_round_trip(kb: KnowledgeSpace) -> None:
    for question, _ in QUESTIONS:
        for hit in kb.search(question, top_k=10):
            parsed = parse_path(hit.path)
            assert parsed.prefix == "ks"
            assert format_path(parsed) == hit.path
            assert (KB / parsed.name).is_file()


def test_hits_are_ordered_by_score_then_path_with_one_hit_per_document(
    kb: KnowledgeSpace,
) -> None:
    hits = kb.search("retention key topic", top_k=30)
    assert [(-h.score, h.path) for h in hits] == sorted((-h.score, h.path) for h in hits)
    assert len({h.path for h in hits}) == len(hits)
    assert all(h.score == round(h.score, 4) for h in hits)


def test_two_spaces_over_the_same_folder_return_the_same_hits(kb: KnowledgeSpace) -> None:
    assert KnowledgeSpace(KB).search("signing key grace period", 10) == kb.search(
        "signing key grace period", 10
    )


def test_top_k_limits_the_hits_and_must_be_positive(kb: KnowledgeSpace) -> None:
    assert len(kb.search("relay", top_k=2)) == 2
    with pytest.raises(ValueError, match="at least 1"):
        kb.search("relay", top_k=0)


def test_hits_convert_to_plain_dicts(kb: KnowledgeSpace) -> None:
    hit = kb.search("default retention", top_k=1)[0]
    assert hit.to_dict() == {
        "path": "ks:config/retention.md",
        "title": "Retention and storage",
        "url": "https://docs.lumen-relay.example/config/retention",
        "score": hit.score,
        "snippet": hit.snippet,
        "chunk": hit.chunk,
    }


def test_read_returns_the_text_without_front_matter_and_the_url(kb: KnowledgeSpace) -> None:
    doc = kb.read("ks:pricing/tiers.md")
    assert doc.path == "ks:pricing/tiers.md"
    assert doc.title == "Pricing tiers"
    assert doc.url == "https://docs.lumen-relay.example/pricing/tiers"
    assert doc.tags == ("pricing", "billing", "tiers", "plans")
    assert doc.text.startswith("# Pricing tiers\n")
    assert "---" not in doc.text.split("\n", 1)[0]
    assert "url:" not in doc.text
    assert doc.to_dict()["tags"] == ["pricing", "billing", "tiers", "plans"]


def test_every_example_doc_has_a_unique_url_and_a_length_of_120_to_350_words(
    kb: KnowledgeSpace,
) -> None:
    urls = []
    for file in sorted(KB.rglob("*.md")):
        doc = kb.read("ks:" + file.relative_to(KB).as_posix())
        assert doc.url is not None and doc.url.startswith("https://docs.lumen-relay.example/")
        assert doc.tags, doc.path
        assert 120 <= len(doc.text.split()) <= 350, doc.path
        urls.append(doc.url)
    assert len(urls) == len(set(urls)) == 30


@pytest.mark.parametrize(
    "path",
    [
        "ks:../pyproject.toml",
        "ks:pricing/../../pyproject.toml",
        "ks:/etc/passwd",
        "/etc/passwd",
        "../pyproject.toml",
        "pricing/tiers.md",
        "fi:t1.files/pricing/tiers.md",
        "",
    ],
)
def test_paths_that_are_not_ks_paths_inside_the_root_are_refused(
    kb: KnowledgeSpace, path: str
) -> None:
    with pytest.raises(KnowledgeError) as info:
        kb.read(path)
    assert info.value.reason == "bad_path"
    assert info.value.path == path


def test_a_symlink_out_of_the_root_is_refused_and_not_indexed(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    write(root / "inside.md", "# Inside\n\nNothing secret here.\n")
    secret = write(tmp_path / "outside" / "secret.md", "# Secret\n\nThe password is marmalade.\n")
    (root / "link.md").symlink_to(secret)
    (root / "linked").symlink_to(secret.parent, target_is_directory=True)
    space = KnowledgeSpace(root)
    assert space.stats().documents == 1
    assert space.search("marmalade password") == []
    for path in ("ks:link.md", "ks:linked/secret.md"):
        with pytest.raises(KnowledgeError) as info:
            space.read(path)
        assert info.value.reason == "outside_root"
        assert "search results" in str(info.value)


def test_a_symlink_inside_the_root_is_read_like_its_target(tmp_path: Path) -> None:
    target = write(tmp_path / "a.md", "---\ntitle: A\n---\nalpha text\n")
    (tmp_path / "b.md").symlink_to(target)
    space = KnowledgeSpace(tmp_path)
    assert space.read("ks:b.md").text == "alpha text\n"
    assert {hit.path for hit in space.search("alpha")} == {"ks:a.md", "ks:b.md"}


def test_a_missing_document_raises_not_found_with_advice(kb: KnowledgeSpace) -> None:
    with pytest.raises(KnowledgeError, match="search the knowledge space") as info:
        kb.read("ks:pricing/nope.md")
    assert info.value.reason == "not_found"


def test_hidden_files_folders_and_other_suffixes_are_not_documents(tmp_path: Path) -> None:
    write(tmp_path / "visible.md", "# Visible\n\nwombat\n")
    write(tmp_path / ".hidden.md", "# Hidden\n\nwombat\n")
    write(tmp_path / ".git" / "notes.md", "# Git\n\nwombat\n")
    write(tmp_path / "data.json", '{"wombat": 1}')
    space = KnowledgeSpace(tmp_path)
    assert [hit.path for hit in space.search("wombat")] == ["ks:visible.md"]
    for path in ("ks:.hidden.md", "ks:.git/notes.md", "ks:data.json"):
        with pytest.raises(KnowledgeError) as info:
            space.read(path)
        assert info.value.reason == "not_a_document"
    with pytest.raises(KnowledgeError) as folder:
        space.read("ks:.git")
    assert folder.value.reason == "not_a_document"


def test_files_over_the_size_limit_are_skipped_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path / "small.md", "# Small\n\nokapi\n")
    write(tmp_path / "big.txt", "okapi " * 100)
    with caplog.at_level(logging.WARNING, logger="actline.tools.search.knowledge"):
        space = KnowledgeSpace(tmp_path, max_file_bytes=200)
    assert space.refresh() == RefreshCounts(0, 0, 0)
    assert [r.getMessage() for r in caplog.records if "big.txt" in r.getMessage()] == [
        "knowledge: skipping big.txt: 600 bytes > 200"
    ]
    assert space.stats().skipped == 1
    assert [hit.path for hit in space.search("okapi")] == ["ks:small.md"]
    with pytest.raises(KnowledgeError) as info:
        space.read("ks:big.txt")
    assert info.value.reason == "too_large"


def test_a_document_without_front_matter_takes_its_first_heading_or_stem_as_title(
    tmp_path: Path,
) -> None:
    write(tmp_path / "notes" / "setup.md", "```\n# not a heading\n```\n\n## Real heading\n\nbody\n")
    write(tmp_path / "plain.txt", "just some words about lemurs\n")
    space = KnowledgeSpace(tmp_path)
    setup = space.read("ks:notes/setup.md")
    assert (setup.title, setup.url, setup.tags) == ("Real heading", None, ())
    assert space.read("ks:plain.txt").title == "plain"
    assert space.search("lemurs")[0].to_dict()["url"] is None


def test_front_matter_accepts_block_lists_and_quoted_values(tmp_path: Path) -> None:
    text = (
        '---\ntitle: "Quoted: title"\nurl: https://x.example/a\n'
        'tags:\n  - one\n  - "two"\n---\nbody\n'
    )
    doc = KnowledgeSpace(write(tmp_path / "a.md", text).parent).read("ks:a.md")
    assert (doc.title, doc.url, doc.tags, doc.text) == (
        "Quoted: title",
        "https://x.example/a",
        ("one", "two"),
        "body\n",
    )


def test_long_sections_are_split_into_chunks_and_the_best_chunk_wins(tmp_path: Path) -> None:
    filler = " ".join(f"word{i}" for i in range(CHUNK_WORDS * 2))
    write(tmp_path / "long.md", f"# Long\n\n{filler}\n\nThe capybara sleeps here.\n")
    space = KnowledgeSpace(tmp_path)
    assert space.stats().chunks == 3
    hit = space.search("capybara")[0]
    assert hit.chunk == 2
    assert hit.snippet == "The capybara sleeps here."


def test_refresh_picks_up_an_added_a_changed_and_a_deleted_file(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    shutil.copytree(KB, root)
    space = KnowledgeSpace(root)
    assert space.refresh() == RefreshCounts(0, 0, 0)

    write(root / "new" / "zebra.md", "---\ntitle: Zebra mode\n---\nZebrafish mode is new.\n")
    tiers = root / "pricing" / "tiers.md"
    before = tiers.stat()
    tiers.write_text(tiers.read_text() + "\nThe quokka discount is 5%.\n")
    os.utime(tiers, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000_000))
    (root / "roadmap.md").unlink()

    assert space.refresh() == RefreshCounts(added=1, updated=1, removed=1)
    assert space.stats().documents == 30
    assert space.search("zebrafish")[0].path == "ks:new/zebra.md"
    assert space.search("quokka")[0].path == "ks:pricing/tiers.md"
    assert "ks:roadmap.md" not in [hit.path for hit in space.search("roadmap", top_k=30)]
    assert space.search("quokka") == KnowledgeSpace(root).search("quokka")


def test_a_file_that_grows_over_the_limit_is_removed_by_refresh(tmp_path: Path) -> None:
    doc = write(tmp_path / "grows.md", "# Grows\n\nnarwhal\n")
    space = KnowledgeSpace(tmp_path, max_file_bytes=100)
    assert space.search("narwhal")[0].path == "ks:grows.md"
    doc.write_text("narwhal " * 20)
    assert space.refresh() == RefreshCounts(added=0, updated=0, removed=1)
    assert space.search("narwhal") == []
    assert space.stats().skipped == 1


def test_a_symlink_loop_is_not_found_and_not_indexed(tmp_path: Path) -> None:
    (tmp_path / "loop.md").symlink_to(tmp_path / "loop.md")
    space = KnowledgeSpace(tmp_path)
    assert space.stats().documents == 0
    with pytest.raises(KnowledgeError) as info:
        space.read("ks:loop.md")
    assert info.value.reason == "not_found"


def test_errors_pickle_with_their_fields() -> None:
    error = KnowledgeError("ks:../x.md", "bad_path", "write the path without '..' segments")
    back = pickle.loads(pickle.dumps(error))
    assert isinstance(back, KnowledgeError) and isinstance(back, ToolError)
    assert (back.path, back.reason, back.detail) == (error.path, error.reason, error.detail)
    assert str(back) == str(error)
    plain = pickle.loads(pickle.dumps(KnowledgeError("ks:a.md", "not_found")))
    assert str(plain).endswith(KNOWLEDGE_REASONS["not_found"])


def test_a_missing_root_raises_a_knowledge_error(tmp_path: Path) -> None:
    with pytest.raises(KnowledgeError) as info:
        KnowledgeSpace(tmp_path / "missing")
    assert info.value.reason == "missing_root"


def test_an_empty_folder_gives_no_hits(tmp_path: Path) -> None:
    space = KnowledgeSpace(tmp_path)
    assert space.search("anything at all") == []
    assert space.stats().documents == space.stats().chunks == 0
    assert space.refresh() == RefreshCounts(0, 0, 0)


def test_a_query_of_only_stop_words_gives_no_hits(kb: KnowledgeSpace) -> None:
    assert tokenize("What is the, and how does it do that?") == []
    assert kb.search("What is the, and how does it do that?") == []
    assert kb.search("") == []


def test_documents_and_queries_are_stemmed_alike() -> None:
    assert tokenize("rotate rotates rotated rotating") == ["rotat"] * 4
    assert tokenize("policy policies applied applies") == ["polici", "polici", "appli", "appli"]
    assert tokenize("cache caches key keys") == ["cach", "cach", "key", "key"]
    assert tokenize("encrypt encryption encrypted") == ["encrypt"] * 3  # Snowball, not -s/-ed


def test_compound_terms_give_themselves_and_their_parts() -> None:
    assert tokenize("storage.retention LR-1042 3.2.1") == [
        "storage.retention",
        "storag",
        "retent",
        "lr-1042",
        "lr",
        "1042",
        "3.2.1",
    ]


@given(query=st.text(max_size=80))
def test_any_query_returns_sorted_hits_without_failing(kb: KnowledgeSpace, query: str) -> None:
    hits = kb.search(query, top_k=10)
    assert [(-h.score, h.path) for h in hits] == sorted((-h.score, h.path) for h in hits)
    assert all(len(h.snippet) <= SNIPPET_CHARS for h in hits)


def test_a_paraphrase_finds_the_document_that_words_it_otherwise(kb: KnowledgeSpace) -> None:
    assert kb.mode == "hybrid", "`make` installs the embeddings extra: the search is hybrid"
    hits = kb.search("One of our private signing keys leaked, what now?", top_k=3)
    assert "ks:security/signing-keys.md" in [h.path for h in hits]


def test_a_query_that_shares_no_word_with_the_space_finds_nothing(kb: KnowledgeSpace) -> None:
    assert kb.search("quokka wombat") == []
