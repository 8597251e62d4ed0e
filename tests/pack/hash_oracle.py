#!/usr/bin/env python3
"""Independent oracle for forktrial's pack hashes (activegraph manifest spec §4).

Written from the description in design.md "Packs and hashes" alone, sharing no
code with the C++ implementation, so the tests can check one against the other:

1. every regular file under the root, recursively; skip entries whose name
   starts with '.', directories named __pycache__, files ending .pyc; other
   non-regular files (fifos, sockets) are skipped;
2. symlinks, to files or directories, are rejected;
3. relative POSIX paths must be valid UTF-8 and NFC-normalized, else rejected;
4. sort by the UTF-8 bytes of the relative path; for each file feed SHA-256
   with: path bytes, one NUL byte, the file length as 8-byte big-endian, the
   bytes.

The content hash leaves out manifest.toml at the root; the bundle hash
includes it.

Usage: hash_oracle.py DIR
Prints {"bundle_hash", "content_hash", "files", "bytes"} as JSON and exits 0,
or prints one "<path>: <why> [<rule>]" line per violation on stderr and exits 1.
"""

import hashlib
import json
import os
import stat
import sys
import unicodedata

CHUNK = 1 << 20


def escaped(path):
    """Relative path bytes as printable text, non-printable bytes as \\xNN."""
    return "".join(chr(b) if 0x20 <= b < 0x7F and b != 0x5C else "\\x%02x" % b for b in path)


def path_problem(relative):
    """The rule a relative path breaks (rule 3), or None."""
    try:
        text = relative.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        return "non-utf8-path", "the path is not valid UTF-8"
    if not unicodedata.is_normalized("NFC", text):
        return "non-nfc-path", "the path is not NFC-normalized"
    return None


def walk(root):
    """Returns ([(relative path bytes, absolute path bytes)], [violations])."""
    files = []
    violations = []
    pending = [b""]
    while pending:
        prefix = pending.pop()
        directory = os.path.join(root, prefix) if prefix else root
        try:
            entries = list(os.scandir(directory))
        except OSError as error:
            violations.append((prefix, "cannot list: %s" % error.strerror, "unreadable"))
            continue
        for entry in entries:
            name = entry.name
            relative = prefix + b"/" + name if prefix else name
            if name.startswith(b"."):
                continue
            mode = entry.stat(follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                try:
                    target = os.stat(entry.path).st_mode
                    kind = "symlink-to-directory" if stat.S_ISDIR(target) else "symlink-to-file"
                except OSError:
                    kind = "symlink-dangling"
                violations.append((relative, "symlinks are not allowed in a pack", kind))
            elif stat.S_ISDIR(mode):
                if name == b"__pycache__":
                    continue
                # Rule 3 is about the paths that are hashed: a directory's name
                # is checked through the paths of the files under it.
                pending.append(relative)
            elif stat.S_ISREG(mode):
                if name.endswith(b".pyc"):
                    continue
                problem = path_problem(relative)
                if problem:
                    violations.append((relative, problem[1], problem[0]))
                files.append((relative, entry.path))
    return files, violations


def feed(hashers, relative, absolute):
    """Feeds one file record to every hasher; returns the file's length."""
    with open(absolute, "rb") as handle:
        length = os.fstat(handle.fileno()).st_size
        for hasher in hashers:
            hasher.update(relative + b"\0" + length.to_bytes(8, "big"))
        seen = 0
        while True:
            chunk = handle.read(CHUNK)
            if not chunk:
                break
            seen += len(chunk)
            for hasher in hashers:
                hasher.update(chunk)
    if seen != length:
        raise OSError("%s changed size while hashing" % escaped(relative))
    return length


def hash_tree(root):
    """Returns (result dict, []) or (None, violations)."""
    root = os.fsencode(root)
    if not os.path.exists(root):
        return None, [(b".", "the pack root does not exist", "root-missing")]
    if not os.path.isdir(root):
        return None, [(b".", "the pack root is not a directory", "root-not-directory")]
    files, violations = walk(root)
    if violations:
        return None, sorted(violations)
    bundle = hashlib.sha256()
    content = hashlib.sha256()
    total = 0
    for relative, absolute in sorted(files):
        hashers = [bundle] if relative == b"manifest.toml" else [bundle, content]
        total += feed(hashers, relative, absolute)
    return {
        "bundle_hash": "sha256:" + bundle.hexdigest(),
        "content_hash": "sha256:" + content.hexdigest(),
        "files": len(files),
        "bytes": total,
    }, []


def main(argv):
    if len(argv) != 2:
        print("usage: hash_oracle.py DIR", file=sys.stderr)
        return 2
    result, violations = hash_tree(argv[1])
    if violations:
        for relative, why, rule in violations:
            print("%s: %s [%s]" % (escaped(relative), why, rule), file=sys.stderr)
        return 1
    print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
