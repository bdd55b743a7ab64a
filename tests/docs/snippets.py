#!/usr/bin/env python3
"""Writes every ```cpp block of the given Markdown files as a program to build and run.

Rules (a block in a language other than cpp is not tested):

- A block with `int main(` is a whole program and is written as it is.
- Any other block is a fragment. Its `#include` lines go to the top, after
  <syncmem/syncmem.hpp> and the standard headers it commonly needs; the rest
  runs in main() on an emulated device, where these names are in scope:
  `device` (emulated:0), `stream` (a syncmem::stream on it) and `n` (1024).
- HTML comments on the lines right above the fence, which Markdown does not
  show, adjust a block:
    <!-- test-setup: CODE -->     CODE (may span lines) runs before the block:
                                  names the surrounding prose introduces
    <!-- test-throws: TYPE -->    the block must end by throwing TYPE
    <!-- test-skip: REASON -->    the block is not built (it needs CUDA, NCCL,
                                  RMM...); its test is listed as disabled

Prints one line per block for CMake: "NAME|FILE" for a program written to
FILE, or "NAME|SKIP|REASON" for a skipped block.
"""

import argparse
import pathlib
import re

FENCE = re.compile(r"^```cpp[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
COMMENT = re.compile(r"<!--\s*test-(setup|throws|skip):(.*?)-->\s*$", re.S)

PRELUDE = """\
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <numeric>
#include <span>
#include <vector>

#include "syncmem/syncmem.hpp"
"""


def directives(text, fence_start):
    """The test-* comments that end on the lines right above the fence, nearest last."""
    found = {}
    before = text[:fence_start].rstrip("\n")
    while before.endswith("-->"):
        start = before.rfind("<!--")
        match = COMMENT.match(before[start:]) if start >= 0 else None
        if not match:
            break
        found.setdefault(match.group(1), match.group(2).strip())
        before = before[:start].rstrip("\n")
    return found


def fragment_program(source, block, setup, throws):
    includes = [line for line in block.splitlines() if line.startswith("#include")]
    body = [line for line in block.splitlines() if not line.startswith("#include")]
    body = "\n".join("    " + line if line else "" for line in body)
    run = f"  {{\n{body}\n  }}\n"
    if throws:
        run = (f"  try {{\n{body}\n  }} catch (const {throws}& e) {{\n"
               f'    std::printf("threw as documented: %s\\n", e.what());\n'
               f"    return 0;\n  }}\n"
               f'  std::fprintf(stderr, "{source}: the block did not throw {throws}\\n");\n'
               f"  return 1;\n")
    else:
        run += "  stream.synchronize();\n  return 0;\n"
    return (f"// Written by tests/docs/snippets.py from {source}; edit the Markdown, not this file.\n"
            f"{PRELUDE}" + "".join(line + "\n" for line in includes) + "\n"
            "int main() {\n"
            "  syncmem::enable_emulated_devices({.device_count = 1});\n"
            "  const syncmem::device_id device = syncmem::device_id::emulated(0);\n"
            "  syncmem::stream stream{device};\n"
            "  const std::size_t n = 1024;\n"
            + (f"  {setup}\n" if setup else "") + run + "}\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=pathlib.Path, help="folder for the programs")
    parser.add_argument("markdown", nargs="+", type=pathlib.Path)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in args.markdown:
        text = path.read_text(encoding="utf-8")
        for index, fence in enumerate(FENCE.finditer(text), start=1):
            name = f"docs_{path.stem}_{index}"
            line = text.count("\n", 0, fence.start()) + 1
            source = f"{path.parent.name}/{path.name}:{line}"
            marks = directives(text, fence.start())
            if "skip" in marks:
                # CMake reads the line as a list: no separators in the reason.
                reason = " ".join(marks["skip"].split()).replace(";", ",").replace("|", "/")
                print(f"{name}|SKIP|{source}: {reason}")
                continue
            block = fence.group(1)
            if re.search(r"\bint\s+main\s*\(", block):
                program = f"// Written by tests/docs/snippets.py from {source}.\n{block}"
            else:
                program = fragment_program(source, block, marks.get("setup"), marks.get("throws"))
            target = args.out / f"{name}.cpp"
            # Unchanged programs keep their time stamps, so a reconfigure rebuilds nothing.
            if not target.exists() or target.read_text(encoding="utf-8") != program:
                target.write_text(program, encoding="utf-8")
            print(f"{name}|{target}")


if __name__ == "__main__":
    main()
