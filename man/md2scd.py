#!/usr/bin/env python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Makes a manual page's scdoc source from a hand-written head (NAME, SYNOPSIS, OPTIONS: what
is the page's own) and a reference document of docs/ (the part the page shares with the web
docs, so that the two cannot drift): the head's line `; @MARKDOWN@` is replaced by the document
converted from the Markdown subset docs/ uses (headings, paragraphs, lists, tables, fenced code,
`code`, **bold**, [links](...)) to scdoc(5).

Usage: md2scd.py HEAD.scd DOC.md OUT.scd"""
import re
import sys

PLACEHOLDER = "; @MARKDOWN@"


def escape(text):
    """Plain text for scdoc: its markup characters taken literally."""
    return re.sub(r"([\\*_])", r"\\\1", text)


def inline(text):
    """One line of Markdown text to scdoc: `code` and **bold** become bold, links their text."""
    out = []
    pos = 0
    pattern = re.compile(r"`([^`]+)`|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)]+)\)")
    for m in pattern.finditer(text):
        out.append(escape(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append("*" + escape(m.group(1)) + "*")
        elif m.group(2) is not None:
            out.append("*" + escape(m.group(2).replace("`", "")) + "*")
        else:
            label, target = m.group(3), m.group(4)
            out.append(inline(label))
            if target.startswith(("http://", "https://")):
                out.append(" (" + escape(target) + ")")
            elif not target.startswith("#"):
                # Another page of docs/: where it is in the installed documentation.
                out.append(" (" + escape("docs/" + target.split("#")[0]) + ")")
        pos = m.end()
    out.append(escape(text[pos:]))
    return "".join(out)


def table(rows):
    """Markdown table rows (header, separator, body) to an scdoc table with borders."""
    cells = [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows]
    header, body = cells[0], [r for r in cells[2:]]
    out = []
    for i, cell in enumerate(header):
        out.append(("[[ " if i == 0 else ":[ ") + "*" + inline(cell).replace("*", "") + "*")
    for row in body:
        row = (row + [""] * len(header))[:len(header)]
        for i, cell in enumerate(row):
            out.append(("|[ " if i == 0 else ":[ ") + inline(cell))
    return out


def convert(markdown):
    lines = markdown.splitlines()
    out = []
    i = 0
    in_code = False
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_code = not in_code
            out.append("```")
            i += 1
            continue
        if in_code:
            out.append(line.replace("\\", "\\\\"))
            i += 1
            continue
        heading = re.match(r"^(#+)\s+(.*)$", line)
        if heading:
            level = len(heading.group(1))
            if level >= 2:  # the document's title is the page's NAME
                title = inline(heading.group(2)).replace("*", "")
                out += ["", ("# " + title.upper()) if level == 2 else ("## " + title), ""]
            i += 1
            continue
        if line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(lines[i])
                i += 1
            out += [""] + table(rows) + [""]
            continue
        item = re.match(r"^(\s*)([-*]|\d+\.)\s+(.*)$", line)
        if item:
            depth = len(item.group(1)) // 2
            mark = "." if item.group(2)[0].isdigit() else "-"
            out.append("\t" * depth + mark + " " + inline(item.group(3)))
            i += 1
            # Continuation lines of the item: indented in Markdown, "plus two spaces" in scdoc.
            while i < len(lines) and lines[i].startswith("  ") and lines[i].strip() and \
                    not re.match(r"^\s*([-*]|\d+\.)\s+", lines[i]):
                out.append("\t" * depth + "  " + inline(lines[i].strip()))
                i += 1
            continue
        if line.strip().startswith("<!--"):
            while i < len(lines) and "-->" not in lines[i]:
                i += 1
            i += 1
            continue
        text = inline(line.strip())
        if text.startswith("; ") or text.startswith(";"):
            text = "\\" + text
        out.append(text)
        i += 1
    if in_code:
        raise SystemExit("md2scd: unterminated ``` block")
    # scdoc wants one empty line around headers and no runs of them.
    squeezed = []
    for line in out:
        if line == "" and squeezed and squeezed[-1] == "":
            continue
        squeezed.append(line)
    return "\n".join(squeezed).strip("\n")


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    head_path, doc_path, out_path = sys.argv[1:]
    with open(head_path, encoding="utf-8") as f:
        head = f.read()
    if PLACEHOLDER not in head:
        raise SystemExit(f"md2scd: {head_path} has no line '{PLACEHOLDER}'")
    with open(doc_path, encoding="utf-8") as f:
        body = convert(f.read())
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(head.replace(PLACEHOLDER, "; From " + doc_path.rsplit("/", 2)[-2] + "/" +
                             doc_path.rsplit("/", 1)[-1] + ", converted by md2scd.py\n\n" + body))


main()
