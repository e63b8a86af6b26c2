"""What a loaded model's file says of itself (its metadata, chat template, description and sizes), read through
llama.cpp's model handle: the part of Model that is about the weights, not about decoding with them."""

from __future__ import annotations

import ctypes
from typing import Any

import llama_cpp


class ModelFacts:
    _model: Any  # llama.cpp's model handle (a llama_model_p; None once closed), which Model sets

    def metadata(self, key: str) -> str | None:
        buf = ctypes.create_string_buffer(1 << 16)
        n = llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        if n < 0:
            return None
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            llama_cpp.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    def chat_template(self) -> str | None:
        template = llama_cpp.llama_model_chat_template(self._model, None)
        return template.decode("utf-8") if template else None

    @property
    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        llama_cpp.llama_model_desc(self._model, buf, len(buf))
        return buf.value.decode("utf-8", errors="replace")

    @property
    def n_layer(self) -> int:
        return llama_cpp.llama_model_n_layer(self._model)

    @property
    def n_params(self) -> int:
        return llama_cpp.llama_model_n_params(self._model)

    @property
    def size_bytes(self) -> int:
        return llama_cpp.llama_model_size(self._model)
