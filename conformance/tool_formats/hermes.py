"""Hermes 2 Pro / 3, Qwen 2.5 / 3, Granite 4: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

One tag pair per call, several in a row for parallel calls; the JSON inside has ``name`` and ``arguments``
in either order (Hermes 2 Pro's model card shows ``arguments`` first). Qwen's function-calling guide
(qwen.readthedocs.io ``framework/function_call``), the Hermes-Function-Calling README and llama.cpp's
``docs/function-calling.md`` ("Hermes 2/3, Qwen 2.5") write it so. Qwen3-Coder and GLM open their calls
with the same tag but write XML inside (``qwen_xml``, ``glm``): a JSON body is this syntax's only.
"""

from __future__ import annotations

import re

from conformance.tool_formats.base import CallSyntax, ParsedOutput, Schemas, call_from_object, decode_json_at

__all__ = ["CLOSE", "OPEN", "Hermes"]

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_CLOSING = re.compile(r"\s*" + re.escape(CLOSE))


class Hermes(CallSyntax):
    name = "hermes"
    markers = (OPEN,)
    ends = (CLOSE,)

    def parse(self, text: str, *, final: bool, schemas: Schemas | None = None) -> ParsedOutput:
        out = ParsedOutput("")
        pos = 0
        while True:
            start = text.find(OPEN, pos)
            if start < 0:
                out.content += text[pos:]
                break
            found = decode_json_at(text, start + len(OPEN))
            call = call_from_object(found[0]) if found is not None else None
            if found is None or call is None:
                # Not (yet) a whole call: a stream waits for more, the final text keeps it as content.
                out.content += text[pos:] if final else text[pos:start]
                break
            end = found[1]
            closing = _CLOSING.match(text, end)
            # An answer that ends after the JSON is a call whose close the server took as a stop string.
            if closing is None and not (final and not text[end:].strip()):
                out.content += text[pos:] if final else text[pos:start]
                break
            out.content += text[pos:start]
            out.calls.append(call)
            pos = closing.end() if closing is not None else len(text)
        out.content = out.content.strip() if out.calls else out.content
        return out
