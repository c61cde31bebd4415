#!/usr/bin/env python3
"""Fails when a document names a file of the repository that does not exist.

Reads every tracked Markdown file but the dated records (docs/reports/,
benchmarks/log/: kept as they were written) and checks
  - relative link targets, [text](path), from the document's folder;
  - backticked paths, `dir/file.ext`, from the repository root (or the
    document's folder);
  - backticked file names of source files, `file.cc`, somewhere in the
    repository;
  - in sample output, glog's citations of a source line (`launch.cc:68]`):
    the line must be a log statement of a file of that name;
skipping what is clearly not a path in this tree (URLs, placeholders in
capitals or angle brackets, globs, a run's outputs under runs/ or build/).

    tests/docs/check_doc_paths.py [REPO_ROOT]

Exits 1 listing each such reference (document:line), 77 outside a git
checkout (ctest: skipped).
"""

import os
import re
import subprocess
import sys

SOURCE_EXT = (".cc", ".h", ".py", ".proto", ".sh", ".cmake", ".cu")
PATH_EXT = SOURCE_EXT + (".md", ".json", ".yaml", ".yml", ".txt", ".gp", ".csv", ".toml", ".cfg")
SKIP_DOCS = ("docs/reports/", "benchmarks/log/")
# A run's outputs and machine paths: named by documents, made by runs.
GENERATED = ("runs/", "build/", "data/", "/", "~", ".gpu/", "dist/", "out/", "RUN_DIR", "DIR/", "OUT/")
PLACEHOLDER = re.compile(r"[A-Z]{2,}[A-Z_]*|[<>*{}$|]|\.\.\.")
# A style guide's made-up names (x.cc, x_test.cc, fuzz_x.cc).
EXAMPLE = re.compile(r"(^|[/_])x[._]")
# Files of other projects that documents name (ONNX's schema, protobuf's).
EXTERNAL = {"onnx.proto", "map_field.h"}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
TICK = re.compile(r"`([^`\s]+)`")
# glog's "file.cc:NNN]" in a sample run's output.
LOG_CITE = re.compile(r"\b([A-Za-z0-9_]+\.(?:cc|h)):(\d+)\]")


def cites_a_log_line(root, paths, number):
    """Whether line `number` of any of `paths` holds a log statement."""
    for path in paths:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = f.read().split("\n")
        if 0 < number <= len(lines) and "LOG" in lines[number - 1]:
            return True
    return False


def tracked(root):
    """The repository's files; None outside a git checkout (a source tarball)."""
    try:
        out = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True)
    except OSError:
        return None
    return out.stdout.split() if out.returncode == 0 and out.stdout else None


def problems(root):
    files = tracked(root)
    if files is None:
        return None
    names = {os.path.basename(f) for f in files}
    dirs = {os.path.dirname(f) for f in files}
    dir_names = {os.path.basename(d) for d in dirs} | {d.split("/")[0] for d in dirs}
    names_by_path = set(files)
    paths_by_name = {}
    for f in files:
        paths_by_name.setdefault(os.path.basename(f), []).append(f)
    found = []
    for doc in files:
        if not doc.endswith(".md") or doc.startswith(SKIP_DOCS):
            continue
        here = os.path.dirname(doc)
        in_code = False
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if line.lstrip().startswith("```"):
                    in_code = not in_code
                    continue
                if in_code:
                    # Commands and sample output are checked by running them,
                    # but for the source lines a sample's log cites.
                    for name, cited in LOG_CITE.findall(line):
                        if not cites_a_log_line(root, paths_by_name.get(name, []), int(cited)):
                            found.append("%s:%d: cites %s:%s, which is no log statement"
                                         % (doc, number, name, cited))
                    continue
                for target in LINK.findall(line):
                    target = target.split("#")[0]
                    if not target or re.match(r"[a-z]+:", target):
                        continue
                    resolved = os.path.normpath(os.path.join(here, target))
                    if not os.path.exists(os.path.join(root, resolved)):
                        found.append("%s:%d: link to %s, which does not exist" % (doc, number, target))
                for token in TICK.findall(line):
                    token = token.rstrip(".,:;)").split(":")[0].split("#")[0]
                    if (not token or PLACEHOLDER.search(token) or token.startswith(GENERATED)
                            or token.startswith("-") or "=" in token or EXAMPLE.search(token)):
                        continue
                    if "/" in token:
                        # A path into this tree: it starts at one of its
                        # folders (a run's files, "run_fn/cluster.json",
                        # do not) and names a file, not a folder.
                        if not token.endswith(PATH_EXT) or token.split("/")[0] not in dir_names:
                            continue
                        exact = [os.path.normpath(token), os.path.normpath(os.path.join(here, token))]
                        if not any(c in names_by_path for c in exact) and not any(
                                f.endswith("/" + token) for f in files):
                            found.append("%s:%d: names %s, which does not exist" % (doc, number, token))
                    elif token.endswith(SOURCE_EXT) and not token.startswith(".") and token not in names \
                            and token not in EXTERNAL:
                        found.append("%s:%d: names %s; no file of that name" % (doc, number, token))
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found = problems(os.path.abspath(root))
    if found is None:
        print("not a git checkout: nothing to check")
        return 77
    for p in found:
        print(p)
    if found:
        print("%d reference(s) to files or lines that do not exist" % len(found), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
