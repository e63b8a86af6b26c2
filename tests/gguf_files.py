"""Writing the suite's generated GGUF files: fields copied from another file, and the writer's closing steps."""

from __future__ import annotations

from pathlib import Path

from gguf import GGUFReader, GGUFValueType, GGUFWriter


def copy_fields(reader: GGUFReader, writer: GGUFWriter, changed: dict[str, object], keep: tuple[str, ...] = ("",)) -> None:
    """`reader`'s fields whose names start with one of `keep` (all by default), with `changed` values in place."""
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture" or not name.startswith(keep):
            continue  # written by GGUFWriter itself
        value = changed.get(name, field.contents())
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY and not value:
            continue  # an empty array cannot be written; llama.cpp reads a missing key as empty
        writer.add_key_value(name, value, kind, sub_type=field.types[-1] if kind == GGUFValueType.ARRAY else None)


def finish(writer: GGUFWriter, path: Path) -> Path:
    """Write what `writer` holds to `path`."""
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
