#!/usr/bin/env python3
"""Gives a fresh checkout the file times of the last build, where the content is the same.

Cargo decides what to rebuild by file modification times. A fresh clone has every file
new, so every crate of the workspace is rebuilt even when the target directory holds a
build of exactly this code. This script keeps, next to that target directory, the git
blob id and modification time each tracked file had at the last build into it; a file
whose blob id is unchanged gets its old time back, any other file keeps its new time
(and the record is updated). So only what changed since the last build into that target
directory is rebuilt, and a revert is a change like any other (the record is the last
build's content, not a history).

The record also names the checkout it was made in. Cargo's fingerprints do not include
where a workspace lives, so a build from another checkout path would look fresh here
while its binaries still point into that other checkout (`env!("CARGO_MANIFEST_DIR")`,
crates compiled from its files). When the path differs, every tracked file is given
the current time, so this checkout's crates are rebuilt however old its files are (the
registry dependencies, most of the build, stay).

Usage: source-mtimes.py TARGET_DIR   (from the checkout's root; on a tree with
uncommitted changes, whose content git's blob ids do not describe, it restores no time
and records only the checkout)
"""
import os
import subprocess
import sys


def tracked_blobs():
    """{path: blob id} of the checkout's index."""
    out = subprocess.run(
        ["git", "ls-files", "-s", "-z"], check=True, capture_output=True
    ).stdout
    blobs = {}
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.split(b"\t", 1)
        blobs[path.decode()] = meta.split()[1].decode()
    return blobs


def read_record(store):
    """(checkout the record was made in or "", {path: (blob id, mtime)})."""
    if not os.path.exists(store):
        return "", {}
    known = {}
    with open(store) as f:
        first = f.readline().rstrip("\n")
        if not first.startswith("root "):
            return "", {}
        for line in f:
            blob, mtime, path = line.rstrip("\n").split(" ", 2)
            known[path] = (blob, int(mtime))
    return first.removeprefix("root "), known


def write_record(store, root, record):
    os.makedirs(os.path.dirname(store), exist_ok=True)
    with open(store + ".tmp", "w") as f:
        f.write(f"root {root}\n")
        for blob, mtime, path in record:
            f.write(f"{blob} {mtime} {path}\n")
    os.replace(store + ".tmp", store)


def main():
    target = sys.argv[1]
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True
    )
    if status.returncode != 0:
        print("source-mtimes: not a git checkout; file times left as they are")
        return
    dirty = status.stdout
    store = os.path.join(target, ".source-mtimes")
    root = os.path.realpath(os.getcwd())
    built_in, known = read_record(store)
    if built_in != root:
        # Artifacts here may come from another checkout (or from one whose record is
        # gone): newer than this checkout's files, they would pass for its build.
        print(f"source-mtimes: the last build was from {built_in or 'an unrecorded checkout'}; "
              "this checkout's crates are rebuilt")
        for path in tracked_blobs():
            if os.path.isfile(path) and not os.path.islink(path):
                os.utime(path)
        known = {}
    if dirty:
        # git's blob ids do not describe an uncommitted tree: record only whose build
        # this is.
        print("source-mtimes: uncommitted changes; file times kept")
        write_record(store, root, [])
        return
    restored = changed = 0
    record = []
    for path, blob in tracked_blobs().items():
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if os.path.islink(path):
            continue
        old = known.get(path)
        if old and old[0] == blob:
            os.utime(path, ns=(st.st_atime_ns, old[1]))
            record.append((blob, old[1], path))
            restored += 1
        else:
            record.append((blob, st.st_mtime_ns, path))
            changed += 1
    write_record(store, root, record)
    print(f"source-mtimes: {restored} files as at the last build, {changed} new or changed")


if __name__ == "__main__":
    main()
