"""Weights once: identical constant buffers are shared by the batch sizes (and CPU levels) of a package.

tfcompile writes one `CLASS_bsN_constants.o` per batch size, each with every
weight of the model, so a package compiled for six batch sizes carries the
weights six times (FACTS.md: batch sizes 2, 4, 8 are byte-identical, 1 lays
some buffers out differently). Each buffer is also padded to the next power of
two (LLVM emits it as a vector type aligned to its size), so a 64 KiB matrix
takes 128 KiB.

The generated header names each buffer by its assembler symbol,
`extern "C" char X[] asm("X");`, and reads it as a 64 byte header (the payload
size) followed by the payload. share_constants() rewrites a package in place:

  * every buffer is cut to header + payload (the padding is zeros, checked);
  * buffers are keyed by their bytes; the first batch size (ascending) that
    has a buffer defines it in its own CLASS_bsN_constants.o, assembled from
    the extracted bytes with `.incbin`;
  * later batch sizes with the same bytes point their header's asm label at
    that symbol instead, so their own constants object only holds what is
    new for them (often nothing).

A multi-level package has the same files again per level (CLASS_bsN_x86_64_v3.h,
...): those come after every size of the lowest level, so code for another CPU
reads the weights the lowest level defines wherever the bytes are the same.

The file layout of the package stays the same (one kernels object and one
constants object per size, plus the archive), so anything that links the
objects of a size or the archive keeps working. A consumer that links a later
size's objects without the earlier sizes' constants objects does not; the
archive has them all.

The data pointer alignment is kept: a buffer starts at the alignment that its
header length guaranteed in the original object (64 bytes for TF 2.21), the
payload follows the header as before. Objects or headers that do not look as
expected (another ELF class, relocations in the data, no asm label) are left
exactly as tfcompile wrote them.
"""

import hashlib
import re
import shutil
import struct
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfaot_dist import names, process
from tfaot_dist.cxx.build_kit import CXX
from tfaot_dist.errors import CompileFailed

# Bump when the bytes this module writes change (part of the build key).
FORMAT_VERSION = 1

_LABEL = re.compile(r'asm\("(\w+_constant_buffer_contents)"\)')
# The access shim of the header: `return {buffer_size, buffer + 64};`
_HEADER_LEN = re.compile(r"return \{buffer_size, buffer \+ (\d+|sizeof\(uint64_t\))\};")

_SHT_PROGBITS, _SHT_SYMTAB, _SHT_RELA, _SHT_REL = 1, 2, 4, 9
_SHF_WRITE, _SHF_EXECINSTR = 0x1, 0x4


@dataclass(frozen=True)
class Buffer:
    symbol: str
    data: bytes  # header + payload, without the power-of-two padding
    align: int  # alignment of the symbol that keeps the payload's alignment

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class SizeReport:
    batch_size: int
    buffers: int = 0
    defined: int = 0  # buffers this size's constants object defines
    shared: int = 0  # buffers read from an earlier size's symbol
    original_bytes: int = 0  # size of tfcompile's constants object
    bytes: int = 0  # size of the rewritten object
    note: str = ""  # why a size was left as tfcompile wrote it
    level: str = ""  # the CPU level of a multi-level package's other levels ("" for the lowest)

    @property
    def key(self) -> str:
        """As the worker's answer and the manifest name it: "N", or "N@LEVEL"."""
        return f"{self.batch_size}@{self.level}" if self.level else str(self.batch_size)


@dataclass
class Report:
    sizes: list[SizeReport] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        defined = sum(s.defined for s in self.sizes)
        return {
            "format": FORMAT_VERSION,
            "buffers": sum(s.buffers for s in self.sizes),
            "unique_buffers": defined,
            "original_bytes": sum(s.original_bytes for s in self.sizes),
            "bytes": sum(s.bytes for s in self.sizes),
            "per_batch_size": {
                s.key: {"defined": s.defined, "shared": s.shared, **({"note": s.note} if s.note else {})}
                for s in self.sizes
            },
        }


def share_constants(
    include_dir: Path,
    lib_dir: Path,
    class_name: str,
    batch_sizes: list[int],
    cxx: str = CXX,
    other_levels: tuple[str, ...] = (),
) -> Report:
    """Rewrite CLASS_bsN.h and CLASS_bsN_constants.o of a package so each distinct buffer exists once.

    other_levels: the CPU levels above the lowest of a multi-level package (files CLASS_bsN_LEVEL*).
    """
    report = Report()
    owners: dict[str, str] = {}  # digest -> symbol that defines those bytes
    stems = [(bs, "", f"{class_name}_bs{bs}") for bs in sorted(batch_sizes)]
    stems += [
        (bs, level, f"{class_name}_bs{bs}_{names.level_suffix(level)}")
        for level in other_levels
        for bs in sorted(batch_sizes)
    ]
    with tempfile.TemporaryDirectory(prefix="tfaot-constants-") as tmp_dir:
        tmp = Path(tmp_dir)
        for bs, level, stem in stems:
            header = include_dir / f"{stem}.h"
            obj = lib_dir / f"{stem}_constants.o"
            if not obj.is_file():
                # Older tfcompile (TF 2.12) keeps the weights in the kernels object: nothing to share.
                report.sizes.append(
                    SizeReport(bs, note="left as compiled: weights inside the kernels object", level=level)
                )
                continue
            size = SizeReport(bs, original_bytes=obj.stat().st_size, bytes=obj.stat().st_size, level=level)
            report.sizes.append(size)
            text = header.read_text()
            try:
                buffers = _read_buffers(obj.read_bytes(), _header_length(text))
                labels = _LABEL.findall(text)
                missing = sorted({b.symbol for b in buffers} - set(labels))
                if missing:
                    raise _Unsupported(f"header names no asm label for {missing[0]}")
            except _Unsupported as exc:
                size.note = f"left as compiled: {exc}"
                continue
            size.buffers = len(buffers)
            own: list[Buffer] = []
            redirect: dict[str, str] = {}
            for buf in buffers:
                owner = owners.get(buf.digest)
                if owner is None:
                    owners[buf.digest] = buf.symbol
                    own.append(buf)
                else:
                    redirect[buf.symbol] = owner
            new_obj = _assemble(own, tmp / stem, cxx)
            if _machine(new_obj.read_bytes()) != _machine(obj.read_bytes()):
                # The host assembler targets another machine (a cross target triple): keep tfcompile's files.
                for buf in own:
                    del owners[buf.digest]
                size.note = "left as compiled: the host assembler targets another machine"
                continue
            for old, new in redirect.items():
                text = _relabel(text, old, new)
            shutil.copyfile(new_obj, obj)
            header.write_text(text)
            size.defined, size.shared = len(own), len(redirect)
            size.bytes = obj.stat().st_size
    return report


class _Unsupported(Exception):
    """The object or header is not in the form this module understands."""


def _header_length(header_text: str) -> int:
    m = _HEADER_LEN.search(header_text)
    if not m:
        raise _Unsupported("no constant buffer access shim in the header")
    return 8 if m.group(1).startswith("sizeof") else int(m.group(1))


def _relabel(text: str, old: str, new: str) -> str:
    needle = f'asm("{old}")'
    if text.count(needle) != 1:
        raise CompileFailed(
            f"constant buffer {old}: expected one asm label in the header, found {text.count(needle)}"
        )
    return text.replace(needle, f'asm("{new}")')


def _lowbit(n: int) -> int:
    return n & -n


def _machine(elf: bytes) -> int:
    return struct.unpack_from("<H", elf, 18)[0] if elf[:4] == b"\x7fELF" else -1


def _read_buffers(elf: bytes, header_len: int) -> list[Buffer]:
    """The constant buffers of a tfcompile constants object (ELF64, little endian, relocatable)."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise _Unsupported("not a little-endian ELF64 object")
    e_type = struct.unpack_from("<H", elf, 16)[0]
    if e_type != 1:
        raise _Unsupported("not a relocatable object")
    shoff = struct.unpack_from("<Q", elf, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", elf, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    # (name, type, flags, addr, offset, size, link, info, addralign, entsize)
    relocated = {s[7] for s in sections if s[1] in (_SHT_RELA, _SHT_REL)}
    symtabs = [s for s in sections if s[1] == _SHT_SYMTAB]
    if len(symtabs) != 1:
        raise _Unsupported("no single symbol table")
    symtab = symtabs[0]
    strtab = sections[symtab[6]]
    buffers = []
    for off in range(symtab[4], symtab[4] + symtab[5], 24):
        st_name, st_info, _other, st_shndx, st_value, st_size = struct.unpack_from("<IBBHQQ", elf, off)
        bind, kind = st_info >> 4, st_info & 0xF
        name_at = strtab[4] + st_name
        name = elf[name_at : elf.index(b"\0", name_at)].decode()
        if bind == 0 or kind not in (0, 1) or not name:  # locals, sections, files
            continue
        if not name.endswith("_constant_buffer_contents"):
            raise _Unsupported(f"unexpected global symbol {name}")
        if st_shndx == 0 or st_shndx >= len(sections):
            raise _Unsupported(f"{name} is not defined in a section")
        sec = sections[st_shndx]
        if sec[1] != _SHT_PROGBITS or sec[2] & (_SHF_WRITE | _SHF_EXECINSTR):
            raise _Unsupported(f"{name} is not in a read-only data section")
        if st_shndx in relocated:
            raise _Unsupported(f"{name}'s section has relocations")
        blob = elf[sec[4] + st_value : sec[4] + st_value + st_size]
        if len(blob) != st_size or st_size < max(header_len, 8):
            raise _Unsupported(f"{name} is truncated")
        payload = struct.unpack_from("<Q", blob, 0)[0]
        end = header_len + payload
        if end > st_size:
            raise _Unsupported(f"{name}: payload of {payload} bytes does not fit its {st_size} byte symbol")
        if any(blob[end:]):
            end = st_size  # the tail is not padding: keep it
        # The payload sits header_len bytes after the symbol: keep the alignment that guaranteed it.
        section_align = max(sec[8], 1)
        symbol_align = min(_lowbit(st_value) if st_value else section_align, section_align)
        buffers.append(Buffer(name, blob[:end], max(1, min(symbol_align, _lowbit(header_len)))))
    return buffers


def _assemble(buffers: list[Buffer], work: Path, cxx: str) -> Path:
    """An object defining each buffer as a global read-only symbol, one section per buffer.

    Separate sections let a consumer linking with --gc-sections drop buffers of
    batch sizes it never references.
    """
    work.mkdir(parents=True)
    lines = []
    for i, buf in enumerate(buffers):
        (work / f"b{i}.bin").write_bytes(buf.data)
        lines += [
            f'\t.section .rodata.{buf.symbol},"a",@progbits',
            f"\t.balign {buf.align}",
            f"\t.globl {buf.symbol}",
            f"\t.type {buf.symbol},@object",
            f"\t.size {buf.symbol},{len(buf.data)}",
            f"{buf.symbol}:",
            f'\t.incbin "b{i}.bin"',
        ]
    lines.append('\t.section .note.GNU-stack,"",@progbits')
    (work / "constants.s").write_text("\n".join(lines) + "\n")
    process.run(
        [cxx, "-c", "-x", "assembler", "constants.s", "-o", "constants.o"],
        cwd=work,
        what="assembling shared constants",
        error=CompileFailed,
    )
    return work / "constants.o"
