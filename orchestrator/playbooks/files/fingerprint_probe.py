"""Collect what this host runs, as raw tool outputs, and print one JSON object.

Run on each node by playbooks/fingerprint.yml with the node's own Python (standard library only).
It only reads: versions from files and tools that exist, nothing installed or changed. orch
parses the raw outputs on the controller with its tested parsers (orchestrator.provision.smi).
"""

import argparse
import hashlib
import json
import os
import platform
import shutil
import stat
import subprocess
import sys

TIMEOUT_S = 20
MODEL_HASH_MAX_BYTES = 1 << 30


def run(argv):
    """stdout of argv, or None when the tool is missing, fails or hangs."""
    if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
        return None
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def os_release():
    out = {}
    for line in (read("/etc/os-release") or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value.strip().strip('"')
    return out


def venv_python(venv):
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        return None
    code = (
        "import json, sys, importlib.metadata as m\n"
        "def v(n):\n"
        "    try:\n"
        "        return m.version(n)\n"
        "    except m.PackageNotFoundError:\n"
        "        return None\n"
        "pkgs = sorted({'%s==%s' % (d.metadata['Name'], d.version) for d in m.distributions()"
        " if d.metadata['Name']})\n"
        "print(json.dumps({'python': '.'.join(map(str, sys.version_info[:3])),"
        " 'torch': v('torch'), 'orch': v('orch'), 'packages': pkgs}))"
    )
    out = run([py, "-c", code])
    return json.loads(out) if out else None


def stack_record(venv):
    """What provisioning wrote beside the venv: the stack's name and its environment variables
    (roles/workload_env, orch-stack.json), or None when there is none or it is not JSON."""
    text = read(os.path.join(venv, "orch-stack.json"))
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def tree_hash(root):
    """sha256 over the regular files under root, as orchestrator/workloads/labmodel.py's tree_hash
    computes it (a unit test holds the two equal): for each file in sorted relative path order,
    its path, NUL, its size, NUL, its bytes. Raises ValueError on a link or another kind of file,
    or beyond MODEL_HASH_MAX_BYTES; OSError when a file cannot be read."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            mode = os.lstat(full).st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise ValueError(full + ": not a regular file or folder")
            if stat.S_ISREG(mode):
                files.append(os.path.relpath(full, root).replace(os.sep, "/"))
    h = hashlib.sha256()
    total = 0
    for rel in sorted(files):
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        total += len(data)
        if total > MODEL_HASH_MAX_BYTES:
            raise ValueError(f"more than {MODEL_HASH_MAX_BYTES} bytes")
        h.update(rel.encode() + b"\0" + str(len(data)).encode() + b"\0")
        h.update(data)
    return "sha256:" + h.hexdigest()


def lab_model(venv):
    """The lab model provisioning built (roles/workload_env: orch-model.json beside the venv) and
    the sha256 of the files at the path it names now, or None when there is no record."""
    text = read(os.path.join(venv, "orch-model.json"))
    if not text:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return {"record": None, "sha256": None, "error": "orch-model.json is not JSON"}
    path = record.get("path") if isinstance(record, dict) else None
    out = {"record": record, "sha256": None, "error": None}
    if not isinstance(path, str) or not path.startswith("/") or os.path.normpath(path) != path:
        out["error"] = "the record names no absolute path"
    elif os.path.islink(path) or not os.path.isdir(path):
        out["error"] = path + ": not a folder"
    else:
        try:
            out["sha256"] = tree_hash(path)
        except (OSError, ValueError) as e:
            out["error"] = "cannot hash " + path + ": " + str(e)
    return out


def stack_image_id(runtime, ref, store):
    """The id of the stack's built image (REPOSITORY:provisioned), or None."""
    if runtime not in ("podman", "docker") or not ref:
        return None
    argv = [runtime]
    if runtime == "podman" and store:
        argv += ["--root", store + "/root", "--runroot", store + "/run"]
    out = run([*argv, "image", "inspect", "--format", "{{.Id}}", ref])
    return (out or "").strip() or None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--venv", default="/opt/orch/venv")
    ap.add_argument("--bench-dir", default="/opt/orch")
    ap.add_argument("--runtime", default="none", help="the node's container_runtime")
    ap.add_argument("--stack-image", default="", help="the stack's built image, REPOSITORY:provisioned")
    ap.add_argument("--image-store", default="", help="its podman store (--root/--runroot parent)")
    args = ap.parse_args()
    rel = os_release()
    facts = {
        "probe_version": 1,
        "hostname": platform.node(),
        "kernel": platform.release(),
        "os": f"{rel.get('ID', '?')}-{rel.get('VERSION_ID', '?')}",
        "system_python": ".".join(map(str, sys.version_info[:3])),
        "venv": venv_python(args.venv),
        "stack_record": stack_record(args.venv),
        "lab_model": lab_model(args.venv),
        "amdgpu_version": (read("/sys/module/amdgpu/version") or "").strip() or None,
        "nvidia_driver_proc": read("/proc/driver/nvidia/version"),
        "rocm_version": (read("/opt/rocm/.info/version") or "").strip() or None,
        "cuda_version_json": read("/usr/local/cuda/version.json"),
        "rccl_tests_revision": (
            read(os.path.join(args.bench_dir, "rccl-tests", "ORCH_REVISION")) or ""
        ).strip()
        or None,
        "nccl_tests_revision": (
            read(os.path.join(args.bench_dir, "nccl-tests", "ORCH_REVISION")) or ""
        ).strip()
        or None,
        "dpkg": run(
            ["dpkg-query", "-W", "-f", "${Package}\\t${Version}\\n", "rccl", "libnccl2", "rocm-core"]
        ),
        "amd_smi_static": run(["amd-smi", "static", "--asic", "--driver"]),
        "rocm_smi_product": run(["rocm-smi", "--showproductname", "--json"]),
        "nvidia_smi_csv": run(
            ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total,pci.bus_id", "--format=csv"]
        ),
        "ibv_devinfo": run(["ibv_devinfo"]),
        "rdma_link": run(["rdma", "-j", "link", "show"]),
        "images": {},
        "stack_image_id": stack_image_id(args.runtime, args.stack_image, args.image_store),
    }
    for runtime in ("podman", "docker"):
        out = run([runtime, "images", "--digests", "--format", "{{.Repository}}@{{.Digest}}"])
        if out is not None:
            facts["images"][runtime] = sorted({ln.strip() for ln in out.splitlines() if "@sha256:" in ln})
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
