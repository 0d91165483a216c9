# -*- coding: utf-8 -*-
# Copyright: moe_infra contributors
# Apache License 2.0 (see LICENSE)
"""Probes run by the interpreter that has torch (torch_stack_info, deepep_doctor): what it imports and loads."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile

from ansible_collections.moe_infra.deepep.plugins.module_utils.build.unprivileged import (
    FALLBACK_USER,
    probe_account,
    run_as,
    start_as,
)

# Shared by both probes: when no NCCL wheel is installed but its directory is there (a pip changing it was stopped
# between its uninstall and its install; the libnccl.so.2 it was writing can be cut short, and loading that kills
# the process with SIGBUS), the wheel and the version to install again, else None. From the nccl layer's wheel
# record, or without one (a pip that was not the layer's) from the stash pip's uninstall left of the dist-info it
# removed (~vidia_nccl_cu13-2.28.9.dist-info). Only a package name and a version are taken from either.
HALF_INSTALLED = r'''
def nccl_half_installed():
    import importlib.metadata as md, importlib.util, json, os, re
    for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            md.version(name)
            return None
        except md.PackageNotFoundError:
            pass
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
        where = list(spec.submodule_search_locations)[0]
    except Exception:
        return None
    try:
        with open(os.path.join(where, ".moe_infra_nccl_wheel.json")) as handle:
            record = json.load(handle)
        package, before = record.get("package"), record.get("version_before")
        if re.match(r"^nvidia-nccl-cu[0-9]+$", str(package)) and re.match(r"^[0-9]+(\.[0-9]+){1,3}$", str(before)):
            return {"package": package, "version_before": before, "dir": where, "pip_stash": None}
    except Exception:
        pass
    try:
        names = sorted(os.listdir(os.path.dirname(os.path.dirname(where))))
    except OSError:
        return None
    for name in names:
        found = re.match(r"^~[^/]*_nccl_(cu[0-9]+)-([0-9]+(\.[0-9]+){1,3})\.dist-info$", name)
        if found:
            return {"package": "nvidia-nccl-" + found.group(1), "version_before": found.group(2), "dir": where,
                    "pip_stash": name}
    return None
def nccl_cut_short():
    # Installed, but its libnccl.so.2 is not the size the wheel's RECORD gives: a pip writing it over the wheel's
    # own (pip install -I, which uninstalls nothing and leaves no stash) was stopped before it finished. The nccl
    # layer's build in place of the wheel's files (its record there) is not the wheel's size, and is not this.
    import importlib.metadata as md, os
    for name in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            found = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for entry in found.files or []:
            if str(entry) == "nvidia/nccl/lib/libnccl.so.2" and entry.size:
                lib = str(entry.locate())
                if os.path.exists(os.path.join(os.path.dirname(os.path.dirname(lib)), ".moe_infra_nccl.json")):
                    return None
                try:
                    size = os.path.getsize(lib)
                except OSError:
                    size = None
                if size != entry.size:
                    return {"package": name, "version": found.version, "lib": lib, "size": size,
                            "recorded_size": entry.size}
        return None
    return None
'''

PROBE = HALF_INSTALLED + r'''
import glob, importlib.metadata as md, importlib.util, json, os, re, sys
out = {"python_version": "%d.%d.%d" % sys.version_info[:3], "torch": {"version": None, "cuda": None, "nccl": None},
       "nvshmem_wheel": None, "nccl_wheel": None, "numpy": None, "pip": None}
def dist(names):
    for name in names:
        try:
            return name, md.version(name)
        except md.PackageNotFoundError:
            pass
    return None, None
def package_dir(module):
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    return list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None
name, version = dist(["nvidia-nvshmem-cu13", "nvidia-nvshmem-cu12"])
root = package_dir("nvidia.nvshmem")
if name and root:
    lib = os.path.join(root, "lib")
    hosts = sorted(glob.glob(os.path.join(lib, "libnvshmem_host.so*")))
    out["nvshmem_wheel"] = {"package": name, "version": version, "dir": root, "lib_dir": lib,
                            "host_lib": hosts[-1] if hosts else None,
                            "ibgda_transport": os.path.exists(os.path.join(lib, "nvshmem_transport_ibgda.so.3"))}
name, version = dist(["nvidia-nccl-cu13", "nvidia-nccl-cu12"])
if name:
    out["nccl_wheel"] = {"package": name, "version": version, "dir": package_dir("nvidia.nccl"), "replaced_by": None,
                         "upgraded_from": None, "half_installed": False, "pip_stash": None, "cut_short": None}
    # The loader names a library by its real path (/proc/self/maps): where site-packages is reached through a
    # symlink (a venv moved to a larger disk), dir is not where torch's NCCL is seen loaded from.
    out["nccl_wheel"]["real_dir"] = os.path.realpath(out["nccl_wheel"]["dir"]) if out["nccl_wheel"]["dir"] else None
    # The nccl layer's record (nccl_runtime) where it put a build in place of the wheel's files, for DeepEP V2.
    try:
        with open(os.path.join(out["nccl_wheel"]["dir"], ".moe_infra_nccl.json")) as record:
            record = json.load(record)
        out["nccl_wheel"]["replaced_by"] = {"version": record.get("version"), "build_dir": record.get("build_dir")}
    except (OSError, TypeError, ValueError, AttributeError):
        pass
    # Its record of upgrading this wheel with pip (the wheel method), while the wheel is still the one it installed.
    try:
        with open(os.path.join(out["nccl_wheel"]["dir"], ".moe_infra_nccl_wheel.json")) as record:
            record = json.load(record)
        before = record.get("version_before")
        # A version for pip to install again, nothing else (it becomes pip's requirement).
        if (record.get("package") == name and record.get("version") == version
                and re.match(r"^[0-9]+(\.[0-9]+){1,3}$", str(before))):
            out["nccl_wheel"]["upgraded_from"] = before
    except (OSError, TypeError, ValueError, AttributeError):
        pass
    # Cut short, it is half-installed too: the version to install again is the one its metadata names, unless the
    # layer's record names the one before its own upgrade.
    cut = nccl_cut_short()
    out["nccl_wheel"]["cut_short"] = cut
    if cut:
        out["nccl_wheel"]["half_installed"] = True
        out["nccl_wheel"]["upgraded_from"] = out["nccl_wheel"]["upgraded_from"] or version
else:
    # Half-installed: the nccl layer installs the version the record names to go back to (V1), or the pin (V2).
    half = nccl_half_installed()
    if half:
        out["nccl_wheel"] = {"package": half["package"], "version": None, "dir": half["dir"], "replaced_by": None,
                             "upgraded_from": half["version_before"], "half_installed": True,
                             "pip_stash": half["pip_stash"], "cut_short": None}
out["numpy"] = dist(["numpy"])[1]
# torch's version as installed, read without importing it: known when the import is not tried (half-installed).
out["torch"]["installed"] = dist(["torch"])[1]
# The interpreter's own pip (python -m pip), which the nccl layer's wheel method runs.
out["pip"] = dist(["pip"])[1]
try:
    # A library pip was writing when it was stopped can be cut short: loading it kills the process (SIGBUS), and
    # with it this reading. Not imported, torch is said not importable, and why.
    cut = (out["nccl_wheel"] or {}).get("cut_short")
    if cut:
        raise ImportError("not imported: its NCCL wheel %s is half-installed (%s is %s bytes, its RECORD says %d: a "
                          "pip writing it was stopped before it finished)" % (
                              cut["package"], cut["lib"], "no" if cut["size"] is None else cut["size"],
                              cut["recorded_size"]))
    if (out["nccl_wheel"] or {}).get("half_installed"):
        raise ImportError("not imported: its NCCL wheel %s is half-installed (a pip changing it was stopped before it "
                          "finished; the libnccl.so.2 it was writing may be cut short)" % out["nccl_wheel"]["package"])
    import torch
    out["torch"]["version"] = torch.__version__
    out["torch"]["cuda"] = torch.version.cuda
    try:
        out["torch"]["nccl_compiled"] = ".".join(str(p) for p in torch.cuda.nccl.version())
    except Exception as exc:
        out["torch"]["nccl_error"] = str(exc)
    # torch.cuda.nccl.version() is the NCCL torch was compiled against; what a process gets is the libnccl the
    # import loaded, asked with ncclGetVersion (a newer NCCL put in place of the wheel's files shows here only).
    try:
        with open("/proc/self/maps") as maps:
            libs = sorted(set(line.split()[-1] for line in maps if "/libnccl.so" in line))
    except OSError:
        libs = []
    out["torch"]["nccl_lib"] = libs[0] if len(libs) == 1 else None
    out["torch"]["nccl_libs"] = libs
    if len(libs) == 1:
        import ctypes
        try:
            code = ctypes.c_int()
            ctypes.CDLL(libs[0]).ncclGetVersion(ctypes.byref(code))
            code = code.value
            major, rest = (code // 10000, code % 10000) if code >= 10000 else (code // 1000, code % 1000)
            out["torch"]["nccl"] = "%d.%d.%d" % (major, rest // 100, rest % 100)
        except Exception as exc:
            out["torch"]["nccl_error"] = "ncclGetVersion of %s: %s" % (libs[0], exc)
    else:
        out["torch"]["nccl"] = out["torch"].get("nccl_compiled")
except Exception as exc:
    out["torch"]["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out))
'''

# After the import, /proc/self/maps says which libnvshmem_host the process really loaded (KF05, KF16).
IMPORT_PROBE = HALF_INSTALLED + r'''
import json
def loaded():
    try:
        with open("/proc/self/maps") as maps:
            paths = set(line.split()[-1] for line in maps if "libnvshmem_host" in line)
        return sorted(paths)
    except OSError:
        return None
class HalfInstalled(Exception):
    pass
try:
    if nccl_half_installed() or nccl_cut_short():
        raise HalfInstalled("ImportError: not imported: torch's NCCL wheel is half-installed (a pip changing it was "
                            "stopped before it finished)")
    import deep_ep
    print(json.dumps({"importable": True, "file": deep_ep.__file__, "error": None, "nvshmem_host_loaded": loaded()}))
except HalfInstalled as exc:
    print(json.dumps({"importable": False, "file": None, "error": str(exc), "nvshmem_host_loaded": None}))
except Exception as exc:
    print(json.dumps({"importable": False, "file": None, "error": "%s: %s" % (type(exc).__name__, exc),
                      "nvshmem_host_loaded": None}))
'''

# What a probe's answer depends on, read without importing torch: the interpreter, its sys.path (PYTHONPATH
# included) with the top-level entries of each directory and their mtimes (a pip install or upgrade adds and
# removes dist-info directories; a rebuilt extension gets a new mtime), the files and directories the
# environment names (LD_PRELOAD, LD_LIBRARY_PATH), the running kernel and NVIDIA driver, the environment itself
# and the probe script.
SYS_PATH = "import json, sys; print(json.dumps([p for p in sys.path if p]))"
KEPT_ANSWERS = 32


def _entries(path):
    try:
        names = sorted(os.listdir(path))
    except OSError:
        return None
    listing = []
    for name in names:
        try:
            listing.append((name, os.stat(os.path.join(path, name)).st_mtime_ns))
        except OSError:
            listing.append((name, None))
    return listing


def _stat(path):
    try:
        st = os.stat(path)
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return None


def _identity(path):
    try:
        st = os.stat(path)
        return (st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        return None


class _Started(object):
    """A probe started as the module's user: finish() waits and returns (rc, stdout, stderr)."""

    def __init__(self, argv, env):
        self.out, self.err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.result = None
        try:
            self.proc = subprocess.Popen(argv, cwd="/", env=dict(os.environ, **env), stdin=subprocess.DEVNULL,
                                         stdout=self.out, stderr=self.err)
        except OSError as exc:  # an interpreter whose own interpreter (a wrapper's #! line) is not there
            self.result = (126, "", "%s: %s" % (argv[0], exc))
            self.out.close()
            self.err.close()

    def finish(self):
        if self.result is not None:
            return self.result
        try:
            self.proc.wait()
            self.out.seek(0)
            self.err.seek(0)
            return (self.proc.returncode, self.out.read().decode("utf-8", "replace"),
                    self.err.read().decode("utf-8", "replace"))
        finally:
            self.out.close()
            self.err.close()


def runner(module, account=None):
    """How the probes run python: as the module's user, or as account (a pwd entry; see unprivileged.run_as) so
    that code on a build's PYTHONPATH (a planted sitecustomize.py, deep_ep itself) never runs as root. run.start
    starts one without waiting (run_probes_cached runs its probes side by side)."""
    def run(argv, env):
        if account is None:
            return module.run_command(argv, environ_update=env, cwd="/")
        return run_as(account, argv, "/", env)

    def start(argv, env):
        if account is None:
            return _Started(argv, env)
        return start_as(account, argv, "/", env)
    run.start = start
    run.user = account.pw_name if account is not None else None
    run.sys_paths = {}  # what _sys_path read with this runner (one module run's probes)
    return run


def _sys_path(python, env, run):
    """The interpreter's sys.path under env, or None. A second probe of one module run reads none again: the same
    environment gives the same answer, and one that only adds PYTHONPATH puts its entries in front of the answer
    without it (a superset of what that interpreter searches, which is all a cache key needs)."""
    user = getattr(run, "user", None)
    seen = run.sys_paths if hasattr(run, "sys_paths") else {}
    known = seen.get((python, tuple(sorted(env.items())), user))
    if known is None and env.get("PYTHONPATH") is not None:
        base = seen.get((python, tuple(sorted((k, v) for k, v in env.items() if k != "PYTHONPATH")), user))
        if base is not None:
            extra = [p for p in env["PYTHONPATH"].split(os.pathsep) if p]
            known = extra + [p for p in base if p not in extra]
    if known is not None:
        return known
    rc, out, dummy = run([python, "-c", SYS_PATH], env)
    if rc != 0:
        return None
    try:
        paths = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None
    seen[(python, tuple(sorted(env.items())), user)] = paths
    return paths


def state_key(module, python, script, env, run=None):
    """Digest of what the probe's answer depends on, or None when it cannot be read (then the probe runs)."""
    run = run or runner(module)
    paths = _sys_path(python, env, run)
    if paths is None:
        return None
    named = []
    for key in ("LD_PRELOAD", "LD_LIBRARY_PATH"):
        for item in re.split(r"[:\s]+", env.get(key) or ""):
            if item:
                named.append((item, _stat(item), _entries(item) if os.path.isdir(item) else None))
    # A new kernel or NVIDIA driver (after a reboot) can change what an import loads.
    try:
        with open("/proc/driver/nvidia/version") as handle:
            driver = handle.readline().strip()
    except OSError:
        driver = None
    # A library put in place of a wheel's (the nccl layer's NCCL) changes no directory listing above it.
    wheel_libs = []
    for path in paths:
        for package in ("nccl", "nvshmem"):
            lib = os.path.join(path, "nvidia", package, "lib")
            if os.path.isdir(lib):
                wheel_libs.append((lib, [(name, _identity(os.path.join(lib, name))) for name in sorted(os.listdir(lib))]))
        # The nccl layer's records beside the wheel's files (what the probe reports of them).
        for record in (".moe_infra_nccl.json", ".moe_infra_nccl_wheel.json"):
            record = os.path.join(path, "nvidia", "nccl", record)
            if os.path.exists(record):
                wheel_libs.append((record, _identity(record)))
    state = {"python": os.path.realpath(python), "python_stat": _stat(os.path.realpath(python)),
             "kernel": os.uname().release, "driver": driver,
             "sys_path": [(path, _entries(path)) for path in paths], "named": named, "wheel_libs": wheel_libs,
             "env": sorted(env.items()), "user": getattr(run, "user", None), "script": hashlib.sha256(script.encode()).hexdigest()}
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def run_probe_cached(module, python, script, env, cache_dir, run=None):
    """(rc, stdout, stderr, cached): the probe's output, from cache_dir when the state it depends on is the one
    an earlier run of it saw. A failing probe is not kept; in check mode nothing is written. run: see runner."""
    return run_probes_cached(module, python, [(script, env)], cache_dir, run)[0]


def run_probes_cached(module, python, probes, cache_dir, run=None):
    """run_probe_cached for each (script, env) of probes, in order: those the cache does not answer run side by
    side, not one after another (each one is an interpreter importing torch, and DeepEP V2's import alone takes
    seconds), and each is kept as run_probe_cached keeps it."""
    run = run or runner(module)
    answers, started = [None] * len(probes), []
    try:
        for index, (script, env) in enumerate(probes):
            key = state_key(module, python, script, env, run) if cache_dir else None
            path = os.path.join(cache_dir, key + ".json") if key else None
            if path and os.path.isfile(path):
                try:
                    with open(path) as handle:
                        answers[index] = (0, json.load(handle)["stdout"], "", True)
                    continue
                except (OSError, ValueError, KeyError):
                    pass
            started.append((index, path, run.start([python, "-c", script], env)))
    finally:
        finished = [(index, path, process.finish()) for index, path, process in started]
    for index, path, (rc, out, err) in finished:
        answers[index] = (rc, out, err, False)
        if path and rc == 0 and not module.check_mode:
            _keep(cache_dir, path, python, out)
    return answers


def _keep(cache_dir, path, python, out):
    try:
        os.makedirs(cache_dir, mode=0o755, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".probe.")
        with os.fdopen(handle, "w") as stream:
            json.dump({"python": python, "stdout": out}, stream)
        os.replace(tmp, path)
        answers = sorted((os.path.getmtime(os.path.join(cache_dir, name)), name) for name in os.listdir(cache_dir)
                         if name.endswith(".json"))
        for dummy, name in answers[:-KEPT_ANSWERS]:
            os.unlink(os.path.join(cache_dir, name))
    except OSError:
        pass  # a cache that cannot be written only costs the next run a probe


# torch_stack_info's options, and deepep_facts' interpreter suboptions (what read_stack takes).
STACK_OPTIONS = dict(
    python=dict(type="path", required=True),
    pythonpath=dict(type="list", elements="path", default=[]),
    environment=dict(type="dict", default={}),
    cache_dir=dict(type="path", default=""),
    missing_ok=dict(type="bool", default=False),
    run_as=dict(type="str", default=""),
)


def _answer(module, python, probe):
    """The JSON line of one run_probes_cached answer, or the module fails saying what the interpreter printed."""
    rc, out, err, dummy = probe
    if rc != 0:
        # Killed by a signal (a library cut short: SIGBUS), the interpreter prints nothing: the signal says it.
        died = -rc if rc < 0 else rc - 128 if 128 < rc < 128 + 65 else None
        said = (err or out).strip()[-2000:] or ("it died of signal %d (%s) and printed nothing" % (
            died, signal.Signals(died).name if died in set(signal.Signals) else "?") if died else "exit %d" % rc)
        module.fail_json(msg="%s could not run the probe: %s" % (python, said), rc=rc)
    try:
        return json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        module.fail_json(msg="unexpected probe output from %s: %s" % (python, out[-2000:]))


def _probe_runner(module, params):
    """The interpreter's runner (as run_as) and the probe's base environment, or the module fails saying what to set."""
    python = params["python"]
    if not os.access(python, os.X_OK):
        module.fail_json(msg="python: %s is not an executable interpreter; set it to the Python that has torch" % python)
    try:
        run = runner(module, probe_account(params["run_as"]))
    except KeyError:
        module.fail_json(msg="run_as: neither %s nor %s is a user on this node; create the build user or set run_as "
                             "to ''" % (params["run_as"], FALLBACK_USER))
    env = {key: str(value) for key, value in (params["environment"] or {}).items()}
    env["LC_ALL"] = "C"
    return run, env


def _import_probe(env, pythonpath):
    return IMPORT_PROBE, dict(env, PYTHONPATH=os.pathsep.join(pythonpath or []))


def _deep_ep_answer(module, python, probe):
    deep_ep = _answer(module, python, probe)
    deep_ep["undefined_symbol"] = bool(deep_ep["error"] and "undefined symbol" in deep_ep["error"])
    return deep_ep


def read_deep_ep(module, params, pythonpaths, stack=None):
    """Whether deep_ep imports from / for the interpreter of STACK_OPTIONS' params (python, environment, cache_dir,
    run_as) with each PYTHONPATH of pythonpaths (the imports side by side): only the import probe (torch_stack_info's
    deep_ep), with cached, one answer per PYTHONPATH. stack: read_stack's params for the same interpreter and user,
    read (build_only) side by side with the imports, so that its next read answers from the probe cache: then the
    return is (answers, read_stack's reading)."""
    run, env = _probe_runner(module, params)
    jobs = [_import_probe(env, path) for path in pythonpaths]
    if stack is not None:
        jobs += _stack_jobs(stack, _probe_runner(module, stack)[1], build_only=True)
    probes = run_probes_cached(module, params["python"], jobs, params["cache_dir"], run)
    answers = [dict(_deep_ep_answer(module, params["python"], probe), cached=probe[3])
               for probe in probes[:len(pythonpaths)]]
    if stack is None:
        return answers
    return answers, _stack_answer(module, stack, probes[len(pythonpaths):])


def _stack_jobs(params, env, build_only):
    """read_stack's probes: the stack probe, and the import unless build_only finds no build to import."""
    pythonpath = params["pythonpath"]
    imports = not (build_only and pythonpath and not any(os.path.isdir(path) for path in pythonpath))
    return [(PROBE, env)] + ([_import_probe(env, pythonpath)] if imports else [])


def _stack_answer(module, params, probes):
    result = _answer(module, params["python"], probes[0])
    if len(probes) > 1:
        result["deep_ep"] = _deep_ep_answer(module, params["python"], probes[1])
    else:
        result["deep_ep"] = {"importable": None, "file": None, "undefined_symbol": False, "nvshmem_host_loaded": None,
                             "error": "not checked: no DeepEP build at %s" % ", ".join(params["pythonpath"])}
    result.update(exists=True, cached=all(probe[3] for probe in probes))
    return result


def read_stack(module, params, build_only=False):
    """torch, NCCL, the NVSHMEM and NCCL wheels, numpy, pip and whether deep_ep imports, as the interpreter of
    STACK_OPTIONS' params sees them (torch_stack_info's return, with exists and cached). build_only: the import
    checks the build on params' pythonpath alone; when it names directories and none exists, none runs (importable
    null): another DeepEP the interpreter has (a hand install) is not the one a run keeps, and importing it costs
    seconds."""
    python = params["python"]
    if params["missing_ok"] and not os.path.lexists(python):
        return dict(exists=False, cached=False, python_version=None, torch={"version": None, "cuda": None, "nccl": None},
                    nvshmem_wheel=None, nccl_wheel=None, numpy=None, pip=None,
                    deep_ep={"importable": False, "file": None, "error": "%s does not exist" % python,
                             "undefined_symbol": False, "nvshmem_host_loaded": None})
    run, env = _probe_runner(module, params)
    # The stack probe and the import side by side: two interpreters importing torch at once.
    probes = run_probes_cached(module, python, _stack_jobs(params, env, build_only), params["cache_dir"], run)
    return _stack_answer(module, params, probes)
