"""Build the stack's container image on this node from what provisioning installed, and print JSON.

Run on each node by the container_image role with the node's own Python (standard library only).
The image holds the stack's tree (e.g. /opt/orch/venv), the interpreter it runs on, that
interpreter's standard library, and the shared libraries that they and every extension module
load (found with ldd): nothing of the controller, nothing else of the host. It is streamed as a tar
into ``RUNTIME import`` (no temporary file) and tagged REPOSITORY:<tree hash>, a hash of every
member's path, type, mode, size, mtime and link target (__pycache__ and folders' times left out:
any Python run writes those): a re-provisioning that changed nothing
finds that tag and builds nothing. REPOSITORY:provisioned names the last image built or found here,
the one runs use. Older tags of REPOSITORY are removed (an image a container still uses stays).

Output: {"changed": bool, "image": "REPO:HASH", "id": "sha256...", "files": N, "bytes": N,
"build_s": seconds or null}. Exit 1 with a message on stderr when the runtime refuses.
"""

import argparse
import fnmatch
import hashlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import tarfile
import tempfile
import time

PROVISIONED = "provisioned"
# Folders every container needs; the runtime mounts /proc, /sys, /dev over the empty ones.
EMPTY_DIRS = {"tmp": 0o1777, "var/tmp": 0o1777, "proc": 0o555, "sys": 0o555, "dev": 0o755,
              "root": 0o700, "run": 0o755, "etc": 0o755}
ETC = {"etc/passwd": "root:x:0:0:root:/root:/bin/sh\n", "etc/group": "root:x:0:\n"}
LDD_LINE = re.compile(r"(?:=>\s*)?(/\S+)\s+\(0x[0-9a-f]+\)")
ELF_MAGIC = b"\x7fELF"


def is_elf(path):
    try:
        with open(path, "rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


def with_links(path):
    """path (its folder resolved) and every symlink on the way to its target, symlinked folders
    included (merged /usr: /lib -> usr/lib): each must be in the image for the path to work."""
    out = []
    seen = set()
    while path not in seen:
        seen.add(path)
        parent = os.path.dirname(path)
        real_parent = os.path.realpath(parent)
        while parent not in ("/", ""):
            if os.path.islink(parent):
                out.extend(with_links(parent))
            parent = os.path.dirname(parent)
        path = os.path.join(real_parent, os.path.basename(path))
        out.append(path)
        if not os.path.islink(path):
            break
        path = os.path.normpath(os.path.join(real_parent, os.readlink(path)))
    return out


def walk(top, exclude=()):
    """Every file, symlink and folder under top (symlinks not followed), but those whose path
    relative to top matches a glob of exclude (a folder's whole subtree)."""

    def kept(path):
        rel = os.path.relpath(path, top)
        return not any(fnmatch.fnmatchcase(rel, g) for g in exclude)

    out = [top]
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if kept(os.path.join(root, d))]
        out.extend(os.path.join(root, d) for d in dirs)
        out.extend(p for p in (os.path.join(root, f) for f in files) if kept(p))
    return out


def ldd(paths, run=subprocess.run):
    """The shared libraries (and the loader) that the ELF files in paths load."""
    libs = set()
    elfs = [p for p in paths if os.path.isfile(p) and not os.path.islink(p) and is_elf(p)]
    for k in range(0, len(elfs), 64):
        proc = run(["ldd", *elfs[k:k + 64]], capture_output=True, text=True, check=False)
        for line in proc.stdout.splitlines():
            m = LDD_LINE.search(line)
            if m and not line.strip().endswith(":"):
                libs.add(os.path.normpath(m.group(1)))
    return libs


def interpreter_paths(python):
    """The real interpreter, the links to it, and its standard library folder."""
    code = "import sys, sysconfig; print(sys.executable); print(sysconfig.get_paths()['stdlib'])"
    proc = subprocess.run([python, "-I", "-c", code], capture_output=True, text=True, check=True)
    exe, stdlib = proc.stdout.split("\n")[:2]
    return with_links(python) + with_links(exe), stdlib


def members(prefix, python, exclude=()):
    """Sorted absolute paths the image holds (without the empty folders and ETC)."""
    links, stdlib = interpreter_paths(python)
    tree = walk(prefix, exclude) + walk(stdlib)
    paths = set(tree) | set(links)
    for lib in ldd([os.path.realpath(p) for p in links] + tree):
        paths.update(with_links(lib))
    for p in list(paths):  # each member's parent folders
        d = os.path.dirname(p)
        while d not in ("/", "") and d not in paths:
            paths.add(d)
            d = os.path.dirname(d)
    return sorted(p for p in paths if os.path.lexists(p))


def tree_hash(paths):
    """sha256 over each member's path, type, mode, size, mtime and link target (first 16 hex).

    Caches and folders' own times do not count: any Python run on the host writes __pycache__
    files into the stdlib or the venv (and so changes their folders' mtimes) without changing
    what the image runs; they are still copied into the image as they are.
    """
    h = hashlib.sha256()
    for p in paths:
        if "__pycache__" in p.split("/"):
            continue
        st = os.lstat(p)
        target = os.readlink(p) if stat.S_ISLNK(st.st_mode) else ""
        size, mtime = (0, 0) if stat.S_ISDIR(st.st_mode) else (st.st_size, st.st_mtime_ns)
        h.update(f"{p}\0{st.st_mode:o}\0{size}\0{mtime}\0{target}\n".encode())
    return h.hexdigest()[:16]


def write_tar(fileobj, paths):
    """The image's root filesystem as a tar stream; returns the bytes of regular files."""
    total = 0
    with tarfile.open(fileobj=fileobj, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name, mode in sorted(EMPTY_DIRS.items()):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        for name, text in ETC.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
        for p in paths:
            arc = p.lstrip("/")
            if arc in EMPTY_DIRS:
                continue
            info = tar.gettarinfo(p, arcname=arc)
            info.uname = info.gname = ""
            if info.isreg():
                total += info.size
                with open(p, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return total


def runtime_argv(runtime, flags, *args):
    return [runtime, *flags, *args]


def image_id(runtime, flags, ref, run=subprocess.run):
    """The image id of ref, or None when the runtime has no such image."""
    proc = run(runtime_argv(runtime, flags, "image", "inspect", "--format", "{{.Id}}", ref),
               capture_output=True, text=True, check=False)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def check(proc, what):
    if proc.returncode != 0:
        sys.stderr.write(f"{what} failed ({proc.returncode}): {(proc.stderr or '').strip()}\n")
        sys.exit(1)


def build(args, run=subprocess.run, popen=subprocess.Popen):
    """Find or build REPOSITORY:<hash>; returns the JSON-able outcome."""
    paths = members(args.prefix, args.python, args.exclude)
    ref = f"{args.repository}:{tree_hash(paths)}"
    flags = args.runtime_flag
    found = image_id(args.runtime, flags, ref, run)
    out = {"changed": found is None, "image": ref, "id": found, "files": len(paths), "bytes": None,
           "build_s": None}
    if found is None:
        t0 = time.monotonic()
        changes = [f"ENV PATH={args.prefix}/bin:/usr/bin:/bin", "WORKDIR /"]
        argv = runtime_argv(args.runtime, flags, "import", *(a for c in changes for a in ("--change", c)),
                            "-", ref)
        with tempfile.TemporaryFile() as err:
            # stderr to a file: a full pipe would stall the runtime while the tar is written
            proc = popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=err)
            try:
                out["bytes"] = write_tar(proc.stdin, paths)
            finally:
                proc.stdin.close()
            rc = proc.wait()
            err.seek(0)
            if rc != 0:
                sys.stderr.write(f"{args.runtime} import failed ({rc}): {err.read().decode().strip()}\n")
                sys.exit(1)
        out["id"] = image_id(args.runtime, flags, ref, run)
        out["build_s"] = round(time.monotonic() - t0, 1)
    check(run(runtime_argv(args.runtime, flags, "tag", ref, f"{args.repository}:{PROVISIONED}"),
              capture_output=True, text=True, check=False), "tag")
    prune(args.runtime, flags, args.repository, ref, run)
    return out


def prune(runtime, flags, repository, keep, run=subprocess.run):
    """Remove the other hash tags of repository (an image in use stays: its rmi fails)."""
    proc = run(runtime_argv(runtime, flags, "images", "--format", "{{.Repository}}:{{.Tag}}"),
               capture_output=True, text=True, check=False)
    for ref in proc.stdout.split():
        repo, _, tag = ref.rpartition(":")
        if repo == repository and ref != keep and tag != PROVISIONED:
            run(runtime_argv(runtime, flags, "rmi", ref), capture_output=True, text=True, check=False)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--prefix", required=True, help="the stack's tree, e.g. /opt/orch/venv")
    p.add_argument("--python", required=True, help="the interpreter the tree runs on (its bin/python)")
    p.add_argument("--repository", required=True, help="e.g. localhost/orch-stack/cpu-gloo")
    p.add_argument("--exclude", action="append", default=[], help="a glob under the prefix to leave out")
    p.add_argument("--runtime", choices=["podman", "docker"], default="podman")
    p.add_argument("--runtime-flag", action="append", default=[], help="a flag before the subcommand")
    args = p.parse_args(argv)
    print(json.dumps(build(args)))


if __name__ == "__main__":
    main()
