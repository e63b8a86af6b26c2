"""JSON schemas the tests hold answers to."""

from __future__ import annotations

# The tiny models write into this one at length: a name and a list of short tags, its keys, quotes and brackets forced text.
TAGGED = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "tags": {"type": "array", "items": {"type": "string", "maxLength": 6}}},
          "required": ["name", "tags"]}
