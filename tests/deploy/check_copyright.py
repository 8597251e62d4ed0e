#!/usr/bin/env python3
"""Checks a Debian copyright file in the machine-readable format
(https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/):
  check_copyright.py FILE
The first paragraph is the format's header; the first Files paragraph is
``Files: *``; every Files paragraph has Copyright and License; every license
a Files paragraph names has its text, in that paragraph (when it names just
one) or in a standalone License paragraph. Prints each problem; exits 1 when
there is one, 0 otherwise.
"""
import re
import sys

FORMAT = "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"


def fields(paragraph):
    """The fields of one paragraph: name -> value, continuation lines kept."""
    out, name = {}, None
    for line in paragraph.splitlines():
        if line[:1] in (" ", "\t"):
            if name is None:
                raise ValueError("a continuation line before any field: %r" % line)
            out[name] += "\n" + line
        else:
            name, colon, value = line.partition(":")
            if not colon:
                raise ValueError("a line that is no field: %r" % line)
            out[name] = value.strip()
    return out


def problems_of(text):
    paragraphs = [fields(p) for p in re.split(r"\n\s*\n", text) if p.strip()]
    if not paragraphs:
        return ["the file is empty"]
    header, rest = paragraphs[0], paragraphs[1:]
    problems = []
    if header.get("Format") != FORMAT:
        problems.append("the first paragraph's Format is %r, not %s" % (header.get("Format"), FORMAT))
    files = [p for p in rest if "Files" in p]
    if not files or files[0]["Files"] != "*":
        problems.append("the first Files paragraph is not Files: *")
    standalone = {p["License"].split("\n")[0] for p in rest if "Files" not in p and "License" in p}
    for p in files:
        if "Copyright" not in p or "License" not in p:
            problems.append("Files: %s lacks Copyright or License" % p["Files"])
            continue
        first, _, body = p["License"].partition("\n")
        names = re.split(r" and | or ", first)
        for name in names:
            if len(names) == 1 and body.strip():
                continue
            if name not in standalone:
                problems.append("Files: %s names the license %s, whose text is nowhere in the file"
                                % (p["Files"], name))
    return problems


def main():
    if len(sys.argv) != 2:
        print("usage: check_copyright.py FILE", file=sys.stderr)
        return 2
    try:
        problems = problems_of(open(sys.argv[1], encoding="utf-8").read())
    except (OSError, ValueError) as error:
        problems = [str(error)]
    for problem in problems:
        print("%s: %s" % (sys.argv[1], problem), file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
