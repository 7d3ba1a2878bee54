#!/usr/bin/env python3
"""Attack/probe harness for neyman's hardening targets (issue 21).

Re-runs the issue's probe classes against a built binary and prints one summary line per class:

    class: N probes, crashes C, lost L, ... ok|FAIL

Usage:
    python3 scripts/probe.py [CLASS...] [--bin PATH] [--quick] [--json] [--seed S] [--keep]

Classes (all when none is given): payloads, stream_lines, state_dirs, http_fuzz, model_files,
connections, stalled_uploads, kill9. The exit status is 1 when any class fails.

Every daemon runs in its own temporary directory on a free loopback port, one at a time, and is
killed on the way out (also on failure or Ctrl-C). Python's standard library only. See
docs/probes.md for what each class checks and what was measured.
"""

import argparse
import atexit
import base64
import gzip
import http.client
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "data")
STREAM = os.path.join(DATA, "streams", "spambase.jsonl.gz")
TOKEN = "probe-admin-token"
I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1
START_NOFILE = resource.getrlimit(resource.RLIMIT_NOFILE)

LIVE = {}  # pid -> Popen of every daemon started and not yet reaped


def kill_all():
    for p in list(LIVE.values()):
        try:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
        except Exception:
            pass
        LIVE.pop(p.pid, None)


atexit.register(kill_all)


def on_signal(signum, _frame):
    kill_all()
    sys.exit(128 + signum)


signal.signal(signal.SIGTERM, on_signal)

# ----------------------------------------------------------------------------------------------
# helpers


def log(msg):
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(v)


BASE_MODEL = {
    "algorithm": "usmo", "prior": 0.38, "prior_min": 0.33, "prior_max": 0.43, "tau": 0.05,
    "delta": 0.05, "calibration_percent": 30, "calibration": "recent", "lambda": 1e-3,
    "kernel": "rbf", "scale": "standard", "seed": 1,
}


def write_config(dirpath, port, source="replay", state="state", **over):
    """A config like config/neyman.toml (or config/http.toml with source="http"), paths inside
    dirpath; `over` maps "section.key" (or "windows.positive.max_events") to a value."""
    sections = {
        "source": {"kind": source},
        "output": {"scores": f"{state}/scores.jsonl", "dlq": f"{state}/dlq.jsonl"},
        "state": {"dir": state, "keep_models": 5},
        "windows": {"max_future": "1d"},
        "windows.positive": {"max_events": 2000, "max_age": "7d", "max_mb": 64},
        "windows.unlabeled": {"max_events": 3000, "max_age": "7d", "max_mb": 64},
        "windows.negative": {"max_events": 2000, "max_age": "7d", "max_mb": 64},
        "retrain": {"min_positive": 50, "min_unlabeled": 300, "min_negative": 100,
                    "every_events": 1000, "time_limit": "2m"},
        "model": dict(BASE_MODEL),
        "scoring": {"buffer_before_model": 100000, "max_wait": "5m",
                    "max_event_bytes": 1048576, "max_features": 16777216,
                    "dimension_quorum": 10},
        "http": {"listen": f"127.0.0.1:{port}", "max_body_bytes": 4194304, "max_batch": 1024},
        "log": {"format": "pretty", "level": "info", "shutdown_timeout": "10s"},
    }
    if source == "replay":
        sections["source"]["path"] = STREAM
        sections["source"]["speed"] = "max"
    else:
        sections["http"]["admin_token_env"] = "PROBE_ADMIN_TOKEN"
    for k, v in over.items():
        sec, key = k.rsplit(".", 1)
        sections.setdefault(sec, {})
        if v is None:
            sections[sec].pop(key, None)
        else:
            sections[sec][key] = v
    path = os.path.join(dirpath, f"probe-{port}.toml")
    with open(path, "w") as f:
        for sec, kv in sections.items():
            f.write(f"[{sec}]\n")
            for k, v in kv.items():
                f.write(f"{k} = {toml_value(v)}\n")
            f.write("\n")
    return path


def daemon_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEYMAN_")}
    env["PROBE_ADMIN_TOKEN"] = TOKEN
    env.pop("RUST_LOG", None)
    env["RUST_BACKTRACE"] = "1"
    return env


def restore_nofile():
    resource.setrlimit(resource.RLIMIT_NOFILE, START_NOFILE)


class Daemon:
    """One neyman process with stderr (and stdout) to files; always reaped."""

    def __init__(self, binary, args, cwd, port=None, name="daemon"):
        self.port = port
        self.err_path = os.path.join(cwd, f"{name}-{time.time_ns()}.err")
        self.out_path = self.err_path[:-4] + ".out"
        self.err = open(self.err_path, "wb")
        self.out = open(self.out_path, "wb")
        self.p = subprocess.Popen([binary] + args, cwd=cwd, stdout=self.out, stderr=self.err,
                                  stdin=subprocess.DEVNULL, env=daemon_env(),
                                  preexec_fn=restore_nofile)
        LIVE[self.p.pid] = self.p
        self.pid = self.p.pid

    def alive(self):
        return self.p.poll() is None

    def wait_http(self, timeout=30):
        end = time.time() + timeout
        while time.time() < end:
            if not self.alive():
                return False
            try:
                st, _ = http_req(self.port, "GET", "/healthz", timeout=2)
                if st == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.05)
        return False

    def stderr(self):
        if not self.err.closed:
            self.err.flush()
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def wait(self, timeout):
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reaped()
        return rc

    def stop(self, timeout=30):
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code (negative: signal)."""
        if self.alive():
            self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
            rc = ("hung-after-SIGTERM", rc)
        self._reaped()
        return rc

    def kill9(self):
        if self.alive():
            self.p.kill()
        rc = self.p.wait()
        self._reaped()
        return rc

    def _reaped(self):
        LIVE.pop(self.p.pid, None)
        self.err.close()
        self.out.close()


def http_req(port, method, path, body=None, headers=None, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def crashed(rc, stderr=""):
    """A panic (101), an abort or a signal: the things that must never happen."""
    if isinstance(rc, tuple):
        return False
    return rc is not None and (rc == 101 or rc < 0 or rc == 134 or "panicked" in stderr)


def stop_checked(d, res, what):
    """Stops daemon `d`; a daemon already dead, or one that crashes on the way out, is a crash."""
    alive = d.alive()
    rc = d.stop()
    err = d.stderr()
    if not alive or crashed(rc, err):
        res.crashes += 1
        res.note(f"{what} died or crashed: exit {rc}: {err[-800:]}", fail=True)


def read_jsonl(path):
    out, bad = [], 0
    if not os.path.exists(path):
        return out, bad
    with open(path, "rb") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                bad += 1
    return out, bad


def stream_records(limit=None):
    with gzip.open(STREAM, "rt") as f:
        out = []
        for line in f:
            out.append(json.loads(line))
            if limit and len(out) >= limit:
                break
        return out


def good_event(rec):
    return rec["payload"]


def post_events(port, channel, body, timeout=60):
    """POST /v1/events/{channel}; retries a full intake queue (503) for a while."""
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"}
    for _ in range(60):
        st, data = http_req(port, "POST", f"/v1/events/{channel}", body=body, headers=headers,
                            timeout=timeout)
        if st != 503:
            return st, data
        time.sleep(0.5)
    return st, data


def feed_good(port, records):
    """Posts good records in channel runs of up to 200; returns the accepted unlabeled ids."""
    ids = []
    run, ch = [], None

    def flush():
        if run:
            st, data = post_events(port, ch, ("[" + ",".join(r["payload"] for r in run) + "]").encode())
            if st != 200:
                raise RuntimeError(f"feeding good events: {st} {data[:200]!r}")
            if ch == "unlabeled":
                ids.extend(r["key"] for r in run)
    for r in records:
        if r["channel"] != ch or len(run) >= 200:
            flush()
            run, ch = [], r["channel"]
        run.append(r)
    flush()
    return ids


def wait_model(port, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        try:
            st, data = http_req(port, "GET", "/v1/model", timeout=5)
            if st == 200:
                return json.loads(data)
        except OSError:
            pass
        time.sleep(0.2)
    return None


def wait_replay_end(d, timeout=120):
    """Waits for a `run` on a replay source to log its end-of-stream summary."""
    end = time.time() + timeout
    while time.time() < end and d.alive():
        if re.search(r"end of the recorded stream|\d+ events: \d+ scored", d.stderr()):
            return True
        time.sleep(0.2)
    return False


def vmrss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Result:
    def __init__(self, name):
        self.name = name
        self.probes = 0
        self.crashes = 0
        self.lost = 0
        self.extra = {}  # other counters printed on the summary line
        self.findings = []  # human-readable notes (bugs, reproducers, skips)
        self.failed = False

    def note(self, msg, fail=False):
        self.findings.append(msg)
        log(("FINDING: " if fail else "note: ") + msg)
        if fail:
            self.failed = True

    def ok(self):
        return not self.failed and self.crashes == 0 and self.lost == 0

    def line(self):
        parts = [f"{self.probes} probes", f"crashes {self.crashes}", f"lost {self.lost}"]
        parts += [f"{k} {v}" for k, v in self.extra.items()]
        return f"{self.name}: " + ", ".join(parts) + (" ok" if self.ok() else " FAIL")

    def as_json(self):
        return {"class": self.name, "probes": self.probes, "crashes": self.crashes,
                "lost": self.lost, **self.extra, "ok": self.ok(), "findings": self.findings}


# ----------------------------------------------------------------------------------------------
# 1. payloads

def dense(n, v="0.5"):
    return "[" + ",".join([v] * n) + "]"


def payload_templates():
    """(name, must_be_rejected, json_valid, f(marker, ts) -> bytes). The marker is in every
    payload so its dead letter can be matched; it is the id wherever the id is valid."""
    X = dense(57)
    T = []

    def add(name, bad, fn, valid_json=True):
        T.append((name, bad, valid_json, fn))

    def ev(m, ts, x=X, extra=""):
        return f'{{"id":"{m}","ts":{ts},"x":{x}{extra}}}'.encode()

    # ids
    add("id_missing", True, lambda m, ts: f'{{"ts":{ts},"x":{X},"probe":"{m}"}}'.encode())
    add("id_null", True, lambda m, ts: f'{{"id":null,"ts":{ts},"x":{X},"probe":"{m}"}}'.encode())
    add("id_number", True, lambda m, ts: f'{{"id":123,"ts":{ts},"x":{X},"probe":"{m}"}}'.encode())
    add("id_empty", True, lambda m, ts: f'{{"id":"","ts":{ts},"x":{X},"probe":"{m}"}}'.encode())
    add("id_257_bytes", True, lambda m, ts: f'{{"id":"{m}{"a" * 257}","ts":{ts},"x":{X}}}'.encode())
    add("id_100k", True, lambda m, ts: f'{{"id":"{m}{"a" * 100000}","ts":{ts},"x":{X}}}'.encode())
    add("id_array", True, lambda m, ts: f'{{"id":["{m}"],"ts":{ts},"x":{X}}}'.encode())
    add("id_object", True, lambda m, ts: f'{{"id":{{"a":"{m}"}},"ts":{ts},"x":{X}}}'.encode())
    add("id_bool", True, lambda m, ts: f'{{"id":true,"ts":{ts},"x":{X},"probe":"{m}"}}'.encode())
    add("id_lone_surrogate", False, lambda m, ts: f'{{"id":"{m}\\ud800","ts":{ts},"x":{X}}}'.encode())
    add("id_nul_escape", False, lambda m, ts: f'{{"id":"{m}\\u0000z","ts":{ts},"x":{X}}}'.encode())
    add("id_256_bytes_ok", False, lambda m, ts: f'{{"id":"{m}{"b" * (256 - len(m))}","ts":{ts},"x":{X}}}'.encode())
    add("id_multibyte_over_256", True, lambda m, ts: f'{{"id":"{m}{"é" * 130}","ts":{ts},"x":{X}}}'.encode())
    # ts
    add("ts_missing", True, lambda m, ts: f'{{"id":"{m}","x":{X}}}'.encode())
    add("ts_null", True, lambda m, ts: f'{{"id":"{m}","ts":null,"x":{X}}}'.encode())
    add("ts_string", True, lambda m, ts: f'{{"id":"{m}","ts":"{ts}","x":{X}}}'.encode())
    add("ts_negative", True, lambda m, ts: ev(m, -1))
    add("ts_float", True, lambda m, ts: ev(m, f"{ts}.5"))
    add("ts_exp", False, lambda m, ts: ev(m, "1.767e12"))
    add("ts_i64_max", True, lambda m, ts: ev(m, I64_MAX))
    add("ts_i64_max_plus1", True, lambda m, ts: ev(m, I64_MAX + 1))
    add("ts_u64_max", True, lambda m, ts: ev(m, U64_MAX))
    add("ts_u64_max_plus1", True, lambda m, ts: ev(m, U64_MAX + 1))
    add("ts_1e400", True, lambda m, ts: ev(m, "1e400"))
    add("ts_10_years_ahead", True, lambda m, ts: ev(m, ts + 10 * 365 * 86400000))
    add("ts_2_days_ahead_of_wall", True, lambda m, ts: ev(m, int(time.time() * 1000) + 2 * 86400000 + 10**7))
    add("ts_zero", False, lambda m, ts: ev(m, 0))
    add("ts_bool", True, lambda m, ts: ev(m, "true"))
    add("ts_array", True, lambda m, ts: ev(m, "[1]"))
    # dense x
    add("x_missing", True, lambda m, ts: f'{{"id":"{m}","ts":{ts}}}'.encode())
    add("x_null", True, lambda m, ts: ev(m, ts, "null"))
    add("x_empty", True, lambda m, ts: ev(m, ts, "[]"))
    add("x_string", True, lambda m, ts: ev(m, ts, '"0.5,0.5"'))
    add("x_number", True, lambda m, ts: ev(m, ts, "5"))
    add("x_bool", True, lambda m, ts: ev(m, ts, "true"))
    add("x_mixed_string", True, lambda m, ts: ev(m, ts, "[" + ",".join(["0.1"] * 56) + ',"a"]'))
    add("x_null_item", True, lambda m, ts: ev(m, ts, "[" + ",".join(["0.1"] * 56) + ",null]"))
    add("x_nested", True, lambda m, ts: ev(m, ts, "[" + ",".join(["[0.1]"] * 57) + "]"))
    add("x_NaN_token", True, lambda m, ts: ev(m, ts, "[" + ",".join(["0.1"] * 56) + ",NaN]"))
    add("x_Infinity_token", True, lambda m, ts: ev(m, ts, "[" + ",".join(["0.1"] * 56) + ",Infinity]"))
    add("x_minus_Infinity", True, lambda m, ts: ev(m, ts, "[-Infinity" + ",0.1" * 56 + "]"))
    add("x_nan_lower", True, lambda m, ts: ev(m, ts, "[nan" + ",0.1" * 56 + "]"))
    add("x_1e400", True, lambda m, ts: ev(m, ts, "[1e400" + ",0.1" * 56 + "]"))
    add("x_minus_1e400", True, lambda m, ts: ev(m, ts, "[-1e400" + ",0.1" * 56 + "]"))
    add("x_1e308_ok", False, lambda m, ts: ev(m, ts, "[1.7e308" + ",0.1" * 56 + "]"))
    add("x_subnormal_ok", False, lambda m, ts: ev(m, ts, "[5e-324" + ",0.1" * 56 + "]"))
    add("x_5000_digit_number", False, lambda m, ts: ev(m, ts, "[1" + "0" * 300 + "." + "1" * 5000 + ",0.1" * 56 + "]"))
    add("x_56_features", True, lambda m, ts: ev(m, ts, dense(56)))
    add("x_58_features", True, lambda m, ts: ev(m, ts, dense(58)))
    add("x_1_feature", True, lambda m, ts: ev(m, ts, dense(1)))
    add("x_3_features", True, lambda m, ts: ev(m, ts, dense(3)))
    add("x_300k_features", True, lambda m, ts: ev(m, ts, dense(300000, "0")))
    add("x_leading_zero_number", True, lambda m, ts: ev(m, ts, "[01" + ",0.1" * 56 + "]"))
    add("x_hex_number", True, lambda m, ts: ev(m, ts, "[0x1" + ",0.1" * 56 + "]"))
    add("x_plus_sign", True, lambda m, ts: ev(m, ts, "[+1" + ",0.1" * 56 + "]"))
    add("x_trailing_comma", True, lambda m, ts: ev(m, ts, "[" + "0.1," * 57 + "]"))
    # sparse x
    sp = lambda m, ts, body: ev(m, ts, "{" + body + "}")
    add("sparse_dim_2^40", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":[1.0],"dim":1099511627776'))
    add("sparse_dim_2^24+1", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":[1.0],"dim":16777217'))
    add("sparse_dim_u64_max", True, lambda m, ts: sp(m, ts, f'"indices":[0],"values":[1.0],"dim":{U64_MAX}'))
    add("sparse_dim_2^64", True, lambda m, ts: sp(m, ts, f'"indices":[0],"values":[1.0],"dim":{U64_MAX + 1}'))
    add("sparse_dim_negative", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":[1.0],"dim":-1'))
    add("sparse_dim_zero", True, lambda m, ts: sp(m, ts, '"indices":[],"values":[],"dim":0'))
    add("sparse_dim_float", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":[1.0],"dim":57.5'))
    add("sparse_dim_string", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":[1.0],"dim":"57"'))
    add("sparse_dim_3", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":[1.0],"dim":3'))
    add("sparse_index_eq_dim", True, lambda m, ts: sp(m, ts, '"indices":[57],"values":[1.0],"dim":57'))
    add("sparse_index_u32_max", True, lambda m, ts: sp(m, ts, '"indices":[4294967295],"values":[1.0],"dim":57'))
    add("sparse_index_2^40", True, lambda m, ts: sp(m, ts, '"indices":[1099511627776],"values":[1.0],"dim":57'))
    add("sparse_index_negative", True, lambda m, ts: sp(m, ts, '"indices":[-1],"values":[1.0],"dim":57'))
    add("sparse_index_float", True, lambda m, ts: sp(m, ts, '"indices":[0.5],"values":[1.0],"dim":57'))
    add("sparse_not_increasing", True, lambda m, ts: sp(m, ts, '"indices":[3,1],"values":[1.0,2.0],"dim":57'))
    add("sparse_duplicate_index", True, lambda m, ts: sp(m, ts, '"indices":[1,1],"values":[1.0,2.0],"dim":57'))
    add("sparse_unequal_lengths", True, lambda m, ts: sp(m, ts, '"indices":[0,1],"values":[1.0],"dim":57'))
    add("sparse_no_values", True, lambda m, ts: sp(m, ts, '"indices":[0],"dim":57'))
    add("sparse_no_indices", True, lambda m, ts: sp(m, ts, '"values":[1.0],"dim":57'))
    add("sparse_extra_key", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":[1.0],"dim":57,"w":1'))
    add("sparse_values_nan_token", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":[NaN],"dim":57'))
    add("sparse_values_1e400", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":[1e400],"dim":57'))
    add("sparse_values_string", True, lambda m, ts: sp(m, ts, '"indices":[0],"values":["1"],"dim":57'))
    add("sparse_100k_indices_out_of_range", True, lambda m, ts: sp(m, ts, '"indices":[' + ",".join(str(i) for i in range(100000)) + '],"values":[' + ",".join(["1"] * 100000) + '],"dim":57'))
    add("sparse_empty_ok", False, lambda m, ts: sp(m, ts, '"indices":[],"values":[],"dim":57'))
    add("sparse_no_dim_ok", False, lambda m, ts: sp(m, ts, '"indices":[0,56],"values":[1.0,2.0]'))
    add("sparse_dim_57_ok", False, lambda m, ts: sp(m, ts, '"indices":[0,56],"values":[1.0,2.0],"dim":57'))
    # meta and structure
    add("meta_string", True, lambda m, ts: ev(m, ts, X, ',"meta":"x"'))
    add("meta_array", True, lambda m, ts: ev(m, ts, X, ',"meta":[1]'))
    add("meta_number", True, lambda m, ts: ev(m, ts, X, ',"meta":5'))
    add("meta_deep_200", True, lambda m, ts: ev(m, ts, X, ',"meta":' + '{"a":' * 200 + "1" + "}" * 200))
    add("meta_deep_100k", True, lambda m, ts: ev(m, ts, X, ',"meta":' + '{"a":' * 100000 + "1" + "}" * 100000))
    add("meta_ok_nested_10", False, lambda m, ts: ev(m, ts, X, ',"meta":' + '{"a":' * 10 + "1" + "}" * 10))
    add("meta_null_ok", False, lambda m, ts: ev(m, ts, X, ',"meta":null'))
    add("unknown_field_ok", False, lambda m, ts: ev(m, ts, X, ',"label":1,"channel":"positive"'))
    add("many_unknown_keys", False, lambda m, ts: ev(m, ts, X, "".join(f',"k{i}":{i}' for i in range(20000))))
    add("deep_array_100k", True, lambda m, ts: (f'"{m}"' + "[" * 100000 + "]" * 100000).encode(), valid_json=False)
    add("deep_array_in_x", True, lambda m, ts: ev(m, ts, "[" * 50000 + "]" * 50000))
    add("duplicate_id", True, lambda m, ts: f'{{"id":"{m}","id":"{m}b","ts":{ts},"x":{X}}}'.encode())
    add("duplicate_ts", True, lambda m, ts: f'{{"id":"{m}","ts":{ts},"ts":{ts + 1},"x":{X}}}'.encode())
    add("duplicate_x", True, lambda m, ts: f'{{"id":"{m}","ts":{ts},"x":{X},"x":{dense(3)}}}'.encode())
    add("duplicate_meta", True, lambda m, ts: ev(m, ts, X, ',"meta":{},"meta":{}'))
    add("escaped_key_id", False, lambda m, ts: f'{{"\\u0069d":"{m}","ts":{ts},"x":{X}}}'.encode())
    add("over_max_event_bytes", True, lambda m, ts: ev(m, ts, X, ',"pad":"' + "p" * (1 << 20) + '"'))
    add("not_object_string", True, lambda m, ts: f'"{m}"'.encode())
    add("not_object_array", True, lambda m, ts: f'[["{m}", {ts}]]'.encode())
    add("not_object_array_of_null", True, lambda m, ts: f'[null, "{m}"]'.encode())
    # not JSON at all (only as single bodies / stream lines)
    add("invalid_utf8_in_string", True, lambda m, ts: f'{{"id":"{m}'.encode() + b"\xff\xfe" + f'","ts":{ts},"x":{X}}}'.encode(), valid_json=False)
    add("invalid_utf8_outside", True, lambda m, ts: ev(m, ts) + b"\xc0\xaf", valid_json=False)
    add("overlong_utf8_slash", True, lambda m, ts: f'{{"id":"{m}\xc0\xaf","ts":{ts},"x":{X}}}'.encode("latin-1"), valid_json=False)
    add("utf8_bom", False, lambda m, ts: b"\xef\xbb\xbf" + ev(m, ts), valid_json=False)
    add("truncated_json", True, lambda m, ts: ev(m, ts)[:-5], valid_json=False)
    add("trailing_garbage", True, lambda m, ts: ev(m, ts) + b"garbage", valid_json=False)
    add("two_objects", True, lambda m, ts: ev(m, ts) + ev(m + "b", ts), valid_json=False)
    add("single_quotes", True, lambda m, ts: ev(m, ts).replace(b'"', b"'"), valid_json=False)
    add("comment", True, lambda m, ts: b"/* c */" + ev(m, ts), valid_json=False)
    add("unquoted_keys", True, lambda m, ts: f'{{id:"{m}",ts:{ts},x:{X}}}'.encode(), valid_json=False)
    add("nul_byte", True, lambda m, ts: ev(m, ts)[:10] + b"\x00" + ev(m, ts)[10:], valid_json=False)
    add("random_binary", True, lambda m, ts: m.encode() + random.Random(m).randbytes(300), valid_json=False)
    add("empty", True, lambda m, ts: b"", valid_json=False)
    add("whitespace", True, lambda m, ts: b" \n\t ", valid_json=False)
    add("lone_bracket", True, lambda m, ts: f'{{"id":"{m}"'.encode(), valid_json=False)
    return T


def classify_answer(st, data, n_items):
    """(answered list per item: 'accepted' | 'dead' | 'rejected'), or None when not answered."""
    if st == 200:
        try:
            a = json.loads(data)
        except ValueError:
            return None
        if a.get("accepted", 0) + a.get("dead_lettered", 0) != n_items:
            return None
        dead = {d.get("index", 0) for d in a.get("dead_letters", [])}
        return ["dead" if i in dead else "accepted" for i in range(n_items)]
    if st in (400, 413):
        return ["rejected"] * n_items
    return None


def markers_in(line):
    """The text of a dead letter in which to look for markers."""
    key = " " + str(line.get("key"))
    if "payload" in line and isinstance(line["payload"], str):
        return line["payload"] + key
    if "payload_b64" in line:
        try:
            return base64.b64decode(line["payload_b64"]).decode("latin-1") + key
        except Exception:
            return key
    return json.dumps(line)


MARKER = re.compile(r"p[bqr][01]-[0-9]{5}")


def find_marker(texts, m):
    """Whether marker m occurs in any text as a whole token (m followed by a non-digit)."""
    pat = re.compile(re.escape(m) + r"(?![0-9])")
    return any(pat.search(t) for t in texts)


def run_payloads(args, res, work):
    templates = payload_templates()
    records = stream_records(None if not args.quick else 2600)
    pre, rest = records[:600], records[600:]
    channels = ["positive", "unlabeled", "negative"]
    base_ts = records[599]["ts"]

    # ---- over HTTP: a daemon with [source] kind = "http"
    port = free_port()
    cfg = write_config(work, port, source="http", state="http")
    d = Daemon(args.bin, ["run", "--config", cfg], work, port, "payloads-http")
    items = []  # dict(name, channel, marker, bad, id, answer)
    score_bad = {"requests": 0, "5xx": 0, "dropped": 0}
    try:
        if not d.wait_http():
            res.note("http daemon did not start: " + d.stderr()[-500:], fail=True)
            return
        counter = [0]

        def new_marker(prefix):
            counter[0] += 1
            return f"{prefix}{counter[0]:05d}"

        def post_single(phase):
            for name, bad, _vj, fn in templates:
                for ch in channels:
                    if ch != "unlabeled" and not bad:
                        # valid-looking payloads only as traffic: ~100 copies of one feature
                        # vector on all three channels are label noise that keeps every model
                        # from the gate (flags_nothing), which is not what this class probes
                        continue
                    m = new_marker(f"pb{phase}-")
                    body = fn(m, base_ts)
                    it = {"name": name, "channel": ch, "marker": m, "bad": bad, "phase": phase}
                    try:
                        st, data = post_events(port, ch, body)
                        try:  # a single body that is a JSON array is a batch of its items
                            parsed = json.loads(body)
                            k = len(parsed) if isinstance(parsed, list) else 1
                        except (ValueError, RecursionError):
                            k = 1
                        ans = classify_answer(st, data, k)
                        it["status"] = st
                        it["answer"] = (("dead" if "dead" in ans else ans[0]) if ans else None)
                        if st >= 500:
                            res.note(f"POST /v1/events/{ch} {name}: status {st}", fail=True)
                    except OSError as e:
                        it["answer"] = None
                        it["status"] = f"dropped: {e}"
                        res.note(f"POST /v1/events/{ch} {name}: connection dropped ({e})", fail=True)
                    items.append(it)

        def post_batches(phase):
            valid = [t for t in templates if t[2]]
            rng = random.Random(7 + phase)
            for ch in channels:
                for b in range(0, len(valid), 8):
                    group = valid[b:b + 8]
                    bodies, its = [], []
                    for name, bad, _vj, fn in group:
                        if ch != "unlabeled" and not bad:
                            continue
                        m = new_marker(f"pq{phase}-")
                        bodies.append(fn(m, base_ts).decode())
                        its.append({"name": name + "[batch]", "channel": ch, "marker": m, "bad": bad, "phase": phase})
                    # one good event in every batch
                    g = rng.choice([r for r in rest if r["channel"] == ch])
                    m = new_marker(f"pq{phase}-")
                    ev = json.loads(g["payload"])
                    ev["id"] = m
                    bodies.append(json.dumps(ev))
                    its.append({"name": "good[batch]", "channel": ch, "marker": m, "bad": False, "phase": phase})
                    try:
                        st, data = post_events(port, ch, ("[" + ",".join(bodies) + "]").encode())
                        ans = classify_answer(st, data, len(its))
                        for i, it in enumerate(its):
                            it["status"] = st
                            it["answer"] = ans[i] if ans else None
                        if st >= 500:
                            res.note(f"batch on {ch}: status {st}", fail=True)
                    except OSError as e:
                        for it in its:
                            it["answer"] = None
                            it["status"] = f"dropped: {e}"
                        res.note(f"batch on {ch}: connection dropped ({e})", fail=True)
                    items.extend(its)

        # phase 0: bad payloads before any dimension is locked
        post_single(0)
        if not d.alive():
            res.note("daemon died in phase 0", fail=True)
        good_ids = feed_good(port, pre)
        # phase 1: after the dimension is locked (57 features)
        post_single(1)
        post_batches(1)
        good_ids += feed_good(port, rest)
        model = wait_model(port, 60)
        if model is None:
            res.note("no model after the good events (GET /v1/model never 200)", fail=True)
        else:
            log(f"http: model version {model.get('version')} n_features {model.get('n_features')}")
        # POST /v1/score with the bad payloads
        for name, bad, _vj, fn in templates:
            body = fn("score-probe", base_ts)
            for b in (body, b"[" + body + b"]" if _vj else body):
                score_bad["requests"] += 1
                try:
                    st, _ = http_req(port, "POST", "/v1/score", body=b,
                                     headers={"Content-Type": "application/json"}, timeout=30)
                    if st >= 500 and st != 503:
                        score_bad["5xx"] += 1
                        res.note(f"POST /v1/score {name}: {st}", fail=True)
                except OSError as e:
                    score_bad["dropped"] += 1
                    res.note(f"POST /v1/score {name}: connection dropped ({e})", fail=True)
        stop_checked(d, res, "http daemon")
    finally:
        if d.alive():
            d.kill9()
    scores, _ = read_jsonl(os.path.join(work, "http", "scores.jsonl"))
    dlq, dlq_torn = read_jsonl(os.path.join(work, "http", "dlq.jsonl"))
    score_ids = {}
    for s in scores:
        sid = s.get("id") or ""
        score_ids[sid] = score_ids.get(sid, 0) + 1
        mm = MARKER.match(sid)
        if mm and mm.group(0) != sid:
            score_ids[mm.group(0)] = score_ids.get(mm.group(0), 0) + 1
    dlq_texts = [markers_in(l) for l in dlq]
    lost_http, accepted_bad = 0, []
    for it in items:
        a = it["answer"]
        if a is None:
            lost_http += 1
            res.note(f"http {it['name']} on {it['channel']}: no answer accounting for it "
                     f"(status {it.get('status')})", fail=True)
            continue
        if a == "dead" and not find_marker(dlq_texts, it["marker"]):
            lost_http += 1
            res.note(f"http {it['name']} on {it['channel']}: dead-lettered in the answer, no DLQ line", fail=True)
        elif a == "accepted":
            if it["bad"] and not find_marker(dlq_texts, it["marker"]):
                accepted_bad.append(f"{it['name']}@{it['channel']}")
            if it["channel"] == "unlabeled" and not score_ids.get(it["marker"]) \
                    and not find_marker(dlq_texts, it["marker"]):
                lost_http += 1
                res.note(f"http {it['name']}: accepted on unlabeled, no score and no DLQ line", fail=True)
    missing_good = sum(1 for i in good_ids if not score_ids.get(i))
    lost_http += missing_good
    if missing_good:
        res.note(f"http: {missing_good} good unlabeled events without a score", fail=True)
    log(f"http: {len(items)} bad-payload events, {len(dlq)} DLQ lines, {len(scores)} scores, "
        f"{len(good_ids)} good unlabeled, lost {lost_http}")

    # ---- as lines of a recorded stream, replayed with `neyman replay`
    lines, rec_items = [], []
    counter = [0]
    rng = random.Random(args.seed)
    bad_lines = []
    for phase in (0, 1):
        for name, bad, _vj, fn in templates:
            for ch in channels:
                if ch != "unlabeled" and not bad:
                    continue  # on the training channels only payloads that must be rejected
                counter[0] += 1
                m = f"pr{phase}-{counter[0]:05d}"
                bad_lines.append((phase, name, bad, ch, m, fn))
    out_lines = []
    first = [b for b in bad_lines if b[0] == 0]
    second = [b for b in bad_lines if b[0] == 1]
    good_unl = []

    def bad_record(b, ts):
        phase, name, bad, ch, m, fn = b
        p = fn(m, ts)
        rec = {"channel": ch, "ts": ts, "key": m}
        try:
            rec["payload"] = p.decode("utf-8")
        except UnicodeDecodeError:
            rec["payload_b64"] = base64.b64encode(p).decode()
        rec_items.append({"name": name, "bad": bad, "channel": ch, "marker": m})
        return json.dumps(rec)

    for b in first:
        out_lines.append(bad_record(b, records[0]["ts"]))
    positions = sorted(rng.sample(range(700, len(records)), len(second)))
    pi = 0
    for i, r in enumerate(records):
        out_lines.append(json.dumps(r))
        if r["channel"] == "unlabeled":
            good_unl.append(r["key"])
        while pi < len(positions) and positions[pi] == i:
            out_lines.append(bad_record(second[pi], r["ts"]))
            pi += 1
    spath = os.path.join(work, "bad-payloads.jsonl")
    with open(spath, "w") as f:
        f.write("\n".join(out_lines) + "\n")
    cfg = write_config(work, free_port(), source="replay", state="rep")
    d = Daemon(args.bin, ["replay", spath, "--config", cfg], work, None, "payloads-replay")
    rc = d.wait(300)
    if rc is None:
        rc = d.kill9()
        res.note("replay of the bad-payload stream did not end within 300 s", fail=True)
    err = d.stderr()
    if crashed(rc, err) or rc != 0:
        res.crashes += 1 if crashed(rc, err) else 0
        res.note(f"replay of bad payloads: exit {rc}: {err[-600:]}", fail=True)
    scores, _ = read_jsonl(os.path.join(work, "rep", "scores.jsonl"))
    dlq, _ = read_jsonl(os.path.join(work, "rep", "dlq.jsonl"))
    score_ids = set()
    for s in scores:
        sid = s.get("id") or ""
        score_ids.add(sid)
        mm = MARKER.match(sid)
        if mm:
            score_ids.add(mm.group(0))
    dlq_texts = [markers_in(l) for l in dlq]
    lost_rep = 0
    http_accepted = set(accepted_bad)
    for it in rec_items:
        in_dlq = find_marker(dlq_texts, it["marker"])
        if in_dlq:
            continue
        if it["channel"] == "unlabeled":
            if it["marker"] not in score_ids:
                lost_rep += 1
                res.note(f"replay {it['name']} on unlabeled: neither scored nor dead-lettered", fail=True)
        elif f"{it['name']}@{it['channel']}" not in http_accepted:
            lost_rep += 1
            res.note(f"replay {it['name']} on {it['channel']}: no dead letter (and accepted nowhere over HTTP)", fail=True)
    missing_good = sum(1 for k in good_unl if k not in score_ids)
    lost_rep += missing_good
    if missing_good:
        res.note(f"replay: {missing_good} good unlabeled events without a score", fail=True)
    summary = [l for l in err.splitlines() if "events:" in l]
    log(f"replay: {len(rec_items)} bad lines, {len(dlq)} DLQ lines, {len(scores)} scores; "
        f"{summary[-1].split('neyman::daemon: ')[-1] if summary else 'no summary line'}")
    res.probes = len(items) + len(rec_items) + score_bad["requests"]
    res.lost = lost_http + lost_rep
    res.extra["http_events"] = len(items)
    res.extra["stream_lines"] = len(rec_items)
    res.extra["score_requests"] = score_bad["requests"]
    res.extra["score_5xx"] = score_bad["5xx"]
    res.extra["dropped"] = score_bad["dropped"]
    uniq = sorted(set(a.split("@")[0] for a in accepted_bad))
    res.extra["accepted_though_invalid"] = len(uniq)
    if uniq:
        res.note("accepted over HTTP although the README says they are invalid: " + ", ".join(uniq))
    if dlq_torn:
        res.note(f"{dlq_torn} DLQ lines are not JSON", fail=True)


# ----------------------------------------------------------------------------------------------
# 2. stream_lines

def bad_stream_lines(ts):
    """(kind, bytes of one line without its newline, expected reason)."""
    ok_payload = json.dumps({"id": "sl-ok", "ts": ts, "x": [0.5] * 57})
    rec = lambda **kw: json.dumps(kw).encode()
    big_garbage = b"x" * (10 * 1024 * 1024)
    return [
        ("not_json", b"this is not json at all", "invalid_record"),
        ("wrong_channel", rec(channel="spam", ts=ts, key=None, payload=ok_payload), "invalid_record"),
        ("missing_channel", rec(ts=ts, key=None, payload=ok_payload), "invalid_record"),
        ("missing_ts", rec(channel="unlabeled", key=None, payload=ok_payload), "invalid_record"),
        ("ts_string", rec(channel="unlabeled", ts=str(ts), key=None, payload=ok_payload), "invalid_record"),
        ("missing_payload", rec(channel="unlabeled", ts=ts, key=None), "invalid_record"),
        ("both_payloads", rec(channel="unlabeled", ts=ts, key=None, payload=ok_payload, payload_b64="e30="), "invalid_record"),
        ("unknown_field", rec(channel="unlabeled", ts=ts, key=None, payload=ok_payload, extra=1), "invalid_record"),
        ("bad_base64", rec(channel="unlabeled", ts=ts, key=None, payload_b64="!!!not base64!!!"), "invalid_record"),
        ("key_number", rec(channel="unlabeled", ts=ts, key=5, payload=ok_payload), "invalid_record"),
        ("headers_wrong_shape", rec(channel="unlabeled", ts=ts, key=None, payload=ok_payload, headers=[["a"]]), "invalid_record"),
        ("json_array", b"[1,2,3]", "invalid_record"),
        ("json_string", b'"a string"', "invalid_record"),
        ("binary_garbage", b"\x00\xff\xfe\x80garbage\x01\x02\xc3\x28", "invalid_record"),
        ("nul_bytes", b"\x00" * 64, "invalid_record"),
        ("truncated_record", rec(channel="unlabeled", ts=ts, key=None, payload=ok_payload)[:40], "invalid_record"),
        ("trailing_garbage", rec(channel="unlabeled", ts=ts, key=None, payload=ok_payload) + b" }}", "invalid_record"),
        ("ten_mb_garbage_line", big_garbage, "invalid_record"),
        ("ten_mb_payload_record", rec(channel="unlabeled", ts=ts, key="sl-big", payload='{"id":"sl-big","pad":"' + "p" * (10 * 1024 * 1024) + '"}'), "too_large"),
        ("deep_nesting_line", b"[" * 200000 + b"]" * 200000, "invalid_record"),
    ]


def build_mixed_stream(records, rng):
    """Good lines with the bad ones, CRLF endings and empty lines spread through; returns
    (bytes, meta) with meta per line: (kind, expected, unlabeled id or None)."""
    bad = bad_stream_lines(records[0]["ts"])
    extra = [("empty_line", b""), ("blank_line", b"   \t "), ("empty_line", b"")]
    n = len(records)
    slots = rng.sample(range(20, n), len(bad) + len(extra))
    after = {}
    for j, s in enumerate(slots):
        after[s] = j
    crlf = set(rng.sample(range(20, n), 5))
    out, meta = [], []
    for i, r in enumerate(records):
        key = r["key"] if r["channel"] == "unlabeled" else None
        if i in crlf:
            out.append(json.dumps(r).encode() + b"\r\n")
            meta.append(("good_crlf", "good", key))
        else:
            out.append(json.dumps(r).encode() + b"\n")
            meta.append(("good", "good", key))
        if i in after:
            j = after[i]
            if j < len(bad):
                kind, line, reason = bad[j]
            else:
                (kind, line), reason = extra[j - len(bad)], "any"
            out.append(line + b"\n")
            meta.append((kind, reason, None))
    return b"".join(out), meta


def check_replay_outputs(res, label, meta, scores, dlq, path_name, upto=None):
    """Every good unlabeled line answered, every bad line dead-lettered with its reason."""
    score_ids = {}
    for s in scores:
        score_ids[s.get("id")] = score_ids.get(s.get("id"), 0) + 1
    dl_lines = {}
    for l in dlq:
        if l.get("reason") == "invalid_record":
            dl_lines[l.get("line")] = l
    reasons = {}
    for l in dlq:
        reasons[l.get("reason")] = reasons.get(l.get("reason"), 0) + 1
    lost = 0
    bad_total, bad_ok = 0, 0
    for idx, (kind, expected, key) in enumerate(meta[:upto] if upto is not None else meta):
        lineno = idx + 1
        if expected == "good":
            if key is not None and not score_ids.get(key):
                lost += 1
                if lost <= 5:
                    res.note(f"{label}: good line {lineno} ({kind}, id {key}) never answered", fail=True)
        elif expected == "invalid_record":
            bad_total += 1
            l = dl_lines.get(lineno)
            if l is None:
                lost += 1
                res.note(f"{label}: bad line {lineno} ({kind}) has no invalid_record dead letter", fail=True)
            else:
                bad_ok += 1
                src = json.dumps(l)
                if path_name not in src:
                    res.note(f"{label}: dead letter of line {lineno} does not name the file: {src[:200]}", fail=True)
        elif expected == "too_large":
            bad_total += 1
            if reasons.get("too_large", 0) < 1:
                lost += 1
                res.note(f"{label}: line {lineno} ({kind}) not dead-lettered as too_large", fail=True)
            else:
                bad_ok += 1
    return lost, bad_total, bad_ok, reasons


def run_stream_lines(args, res, work):
    records = stream_records(1500 if args.quick else 3000)
    rng = random.Random(args.seed)
    data, meta = build_mixed_stream(records, rng)
    n_bad = sum(1 for m in meta if m[1] not in ("good",))
    kinds = sorted({m[0] for m in meta if m[1] != "good"})
    log(f"stream: {len(meta)} lines, {n_bad} bad/odd lines of {len(kinds)} kinds")
    variants = []
    plain = os.path.join(work, "mixed.jsonl")
    with open(plain, "wb") as f:
        f.write(data)
    variants.append(("plain", plain, None))
    gz = os.path.join(work, "mixed.jsonl.gz")
    with gzip.open(gz, "wb") as f:
        f.write(data)
    variants.append(("gzip", gz, None))
    raw = open(gz, "rb").read()
    # truncate the compressed file at 60 % of its length (beyond the 10 MB lines' blocks)
    cut = int(len(raw) * 0.6)
    tgz = os.path.join(work, "truncated.jsonl.gz")
    with open(tgz, "wb") as f:
        f.write(raw[:cut])
    dec = zlib.decompressobj(16 + zlib.MAX_WBITS)
    readable = dec.decompress(raw[:cut])
    complete = readable.count(b"\n")
    variants.append(("truncated_gz", tgz, complete))
    total_lost = 0
    for label, path, upto in variants:
        st = os.path.join(work, f"st-{label}")
        cfg = write_config(work, free_port(), source="replay", state=f"st-{label}")
        d = Daemon(args.bin, ["replay", path, "--config", cfg], work, None, f"lines-{label}")
        rc = d.wait(300)
        if rc is None:
            rc = d.kill9()
            res.note(f"{label}: replay did not end within 300 s", fail=True)
        err = d.stderr()
        res.probes += sum(1 for m in (meta[:upto] if upto is not None else meta) if m[1] != "good")
        res.extra["lines"] = res.extra.get("lines", 0) + (upto if upto is not None else len(meta))
        if crashed(rc, err):
            res.crashes += 1
            res.note(f"{label}: crash exit {rc}: {err[-600:]}", fail=True)
        name = os.path.basename(path)
        if upto is None and rc != 0:
            res.note(f"{label}: exit {rc} on a readable file: {err.strip().splitlines()[-1:]}", fail=True)
        if upto is not None:
            lastlines = [l for l in err.strip().splitlines() if "error" in l.lower()]
            if rc in (0, None) or not any(name in l for l in lastlines):
                res.note(f"{label}: exit {rc}; expected a non-zero exit naming {name}: {lastlines[-1:]}", fail=True)
            else:
                log(f"{label}: exit {rc}: {lastlines[-1][:200]}")
        scores, _ = read_jsonl(os.path.join(st, "scores.jsonl"))
        dlq, _ = read_jsonl(os.path.join(st, "dlq.jsonl"))
        lost, bad_total, bad_ok, reasons = check_replay_outputs(res, label, meta, scores, dlq, name, upto)
        total_lost += lost
        log(f"{label}: exit {rc}, {len(scores)} scores, DLQ reasons {reasons}, bad lines dead-lettered "
            f"{bad_ok}/{bad_total}, lost {lost}" + (f" (first {upto} complete lines readable)" if upto else ""))
    res.lost = total_lost
    res.extra["bad_kinds"] = len(kinds)
    res.extra["variants"] = len(variants)


# ----------------------------------------------------------------------------------------------
# 3. state_dirs

HDR = 25  # magic 8 + version 4 + tag 1 + payload length 8 + CRC-32 4


def patch_f64(blob, old, new, every=False):
    """Replaces the f64 `old` (little-endian) in a framed model by `new` and fixes the CRC-32;
    None when `old` is not found exactly once in the payload (or at all, with `every`)."""
    pat = struct.pack("<d", old)
    payload = blob[HDR:]
    if payload.count(pat) < 1 or (payload.count(pat) > 1 and not every):
        return None
    payload = payload.replace(pat, struct.pack("<d", new))
    hdr = bytearray(blob[:HDR])
    hdr[21:25] = struct.pack("<I", zlib.crc32(payload) & 0xFFFFFFFF)
    return bytes(hdr) + payload


def inspect_model(binary, path):
    p = subprocess.run([binary, "model", "inspect", path], capture_output=True, timeout=60)
    if p.returncode != 0:
        return None, p.returncode, p.stderr.decode("utf-8", "replace")
    return json.loads(p.stdout), 0, ""


def make_state_dir(args, work):
    """A state directory with 4 models from the bundled stream; returns its path."""
    cfg = write_config(work, free_port(), source="replay", state="golden")
    d = Daemon(args.bin, ["replay", STREAM, "--config", cfg], work, None, "golden")
    rc = d.wait(300)
    if rc != 0:
        raise RuntimeError(f"building a state dir failed: {rc} {d.stderr()[-500:]}")
    return os.path.join(work, "golden")


def run_state_dirs(args, res, work):
    golden = make_state_dir(args, work)
    models = sorted(n for n in os.listdir(os.path.join(golden, "models")) if n.endswith(".nmd"))
    newest = models[-1]
    newest_v = int(newest.split("-")[1].split(".")[0])
    info, _, _ = inspect_model(args.bin, os.path.join(golden, "models", newest))
    thr = info["threshold"]["threshold"] if isinstance(info.get("threshold"), dict) else info.get("threshold")
    bias = info.get("bias")
    blob = open(os.path.join(golden, "models", newest), "rb").read()
    root = os.geteuid() == 0

    def mpath(sd, name=newest):
        return os.path.join(sd, "models", name)

    def w(path, data, mode="wb"):
        with open(path, mode) as f:
            f.write(data)

    def flip(sd, off):
        p = mpath(sd)
        b = bytearray(open(p, "rb").read())
        b[off] ^= 0xFF
        w(p, bytes(b))

    def trunc(sd, n):
        p = mpath(sd)
        w(p, open(p, "rb").read()[:n])

    def nonfinite(sd, which, value):
        old = thr if which == "threshold" else bias
        # the bias is also in the training report: replace every copy
        b = patch_f64(blob, old, value, every=(which == "bias"))
        if b is None:
            return "skip"
        w(mpath(sd), b)

    def all_models_corrupt(sd):
        for m in models:
            p = mpath(sd, m)
            b = bytearray(open(p, "rb").read())
            b[len(b) // 2] ^= 0x55
            w(p, bytes(b))

    def orphan_tmp(sd):
        for p in [os.path.join(sd, "models", ".model-00000000000000000005.nmd.tmp"),
                  os.path.join(sd, "models", "model-00000000000000000005.nmd.tmp"),
                  os.path.join(sd, ".version.tmp"), os.path.join(sd, "version.tmp")]:
            w(p, b"half-written")

    def unreadable(sd):
        os.chmod(mpath(sd), 0)

    def model_is_dir(sd):
        os.makedirs(mpath(sd, "model-00000000000000000009.nmd"))

    def dir_as_version(sd):
        os.remove(os.path.join(sd, "version"))
        os.makedirs(os.path.join(sd, "version"))

    def models_is_file(sd):
        shutil.rmtree(os.path.join(sd, "models"))
        w(os.path.join(sd, "models"), b"not a directory")

    def torn_scores(sd):
        w(os.path.join(sd, "scores.jsonl"), b'{"id":"a","score":1.0}\n{"id":"b","sco', "ab")

    def dlq_is_dir(sd):
        p = os.path.join(sd, "dlq.jsonl")
        if os.path.exists(p):
            os.remove(p)
        os.makedirs(p)

    def stale_lock(sd):
        w(os.path.join(sd, "lock"), b"999999\n")

    def version_behind(sd):
        w(os.path.join(sd, "version"), b"1\n")

    def garbage_models(sd):
        w(mpath(sd, "model-abc.nmd"), b"junk")
        w(mpath(sd, "README"), b"junk")
        w(mpath(sd, "model-99999999999999999999.nmd"), b"NEYMANMD")

    def future_format(sd):
        b = bytearray(blob)
        b[8:12] = struct.pack("<I", 99)
        w(mpath(sd), bytes(b))

    def huge_length(sd):
        b = bytearray(blob)
        b[13:21] = struct.pack("<Q", 2**62)
        w(mpath(sd), bytes(b))

    cases = [
        ("version_garbled", "refuse", lambda sd: w(os.path.join(sd, "version"), b"garbage\n")),
        ("version_u64_max", "refuse", lambda sd: w(os.path.join(sd, "version"), f"{U64_MAX}\n".encode())),
        ("version_over_u64", "refuse", lambda sd: w(os.path.join(sd, "version"), b"99999999999999999999999\n")),
        ("version_negative", "refuse", lambda sd: w(os.path.join(sd, "version"), b"-1\n")),
        ("version_empty", "either", lambda sd: w(os.path.join(sd, "version"), b"")),
        ("version_binary", "refuse", lambda sd: w(os.path.join(sd, "version"), b"\xff\x00\xfe")),
        ("version_is_directory", "refuse", dir_as_version),
        ("version_behind_models", "either", version_behind),
        ("model_truncated_half", "resume_prev", lambda sd: trunc(sd, len(blob) // 2)),
        ("model_truncated_in_header", "resume_prev", lambda sd: trunc(sd, 10)),
        ("model_empty", "resume_prev", lambda sd: trunc(sd, 0)),
        ("model_flipped_payload_byte", "resume_prev", lambda sd: flip(sd, len(blob) // 2)),
        ("model_flipped_magic", "resume_prev", lambda sd: flip(sd, 0)),
        ("model_flipped_crc", "resume_prev", lambda sd: flip(sd, 22)),
        ("model_future_format_version", "resume_prev", future_format),
        ("model_length_2^62", "resume_prev", huge_length),
        ("model_nan_threshold_valid_crc", "resume_prev", lambda sd: nonfinite(sd, "threshold", float("nan"))),
        ("model_neg_inf_threshold_valid_crc", "resume_prev", lambda sd: nonfinite(sd, "threshold", float("-inf"))),
        ("model_nan_bias_valid_crc", "resume_prev", lambda sd: nonfinite(sd, "bias", float("nan"))),
        ("all_models_corrupt", "no_model", all_models_corrupt),
        ("orphan_tmp_files", "resume", orphan_tmp),
        ("model_path_is_directory", "resume", model_is_dir),
        ("garbage_files_in_models", "resume", garbage_models),
        ("model_unreadable_0000", "resume_prev" if not root else "either", unreadable),
        ("models_is_a_file", "refuse", models_is_file),
        ("torn_last_scores_line", "resume", torn_scores),
        ("dlq_path_is_directory", "refuse", dlq_is_dir),
        ("stale_lock_file", "resume", stale_lock),
    ]
    if args.quick:
        cases = cases[::2]
    outcomes = {"started": 0, "refused": 0}
    for name, expect, mutate in cases:
        sd = os.path.join(work, f"sd-{name}")
        shutil.copytree(golden, sd)
        if mutate(sd) == "skip":
            res.note(f"{name}: skipped (the value to replace is not unique in the model payload)")
            continue
        res.probes += 1
        port = free_port()
        cfg = write_config(work, port, source="http", state=f"sd-{name}")
        d = Daemon(args.bin, ["run", "--config", cfg], work, port, f"sd-{name}")
        up = d.wait_http(20)
        version, ready = None, None
        if up:
            try:
                st, data = http_req(port, "GET", "/v1/model")
                version = json.loads(data).get("version") if st == 200 else None
                ready, _ = http_req(port, "GET", "/readyz")
            except OSError:
                pass
            rc = d.stop()
        else:
            rc = d.wait(20)
            if rc is None:
                rc = d.kill9()
                res.note(f"{name}: neither serving nor exited in 20 s", fail=True)
        err = d.stderr()
        warns = [l for l in err.splitlines() if " WARN " in l or " ERROR " in l or "error" in l.lower()]
        if crashed(rc, err):
            res.crashes += 1
            res.note(f"{name}: crash, exit {rc}: {err[-500:]}", fail=True)
            continue
        if up:
            outcomes["started"] += 1
            desc = f"started, serving v{version}" if version else "started, no model"
        else:
            outcomes["refused"] += 1
            desc = f"refused, exit {rc}: {(err.strip().splitlines() or [''])[-1][:160]}"
        why = [l for l in err.splitlines() if "not resumed" in l]
        if why:
            desc += " (" + why[0].split("reason=", 1)[-1][:110] + ")"
        log(f"{name}: {desc}")
        if name.startswith("model_") and expect == "resume_prev":
            if version == newest_v:
                res.note(f"{name}: served the corrupted model v{version}", fail=True)
            if not any(newest in l for l in warns):
                res.note(f"{name}: no warning naming {newest}", fail=True)
        if expect == "refuse" and up:
            res.note(f"{name}: started (serving v{version}) where a refusal was expected")
        if not up and rc != 2:
            res.note(f"{name}: exit {rc} (expected 2 for a refusal)", fail=rc not in (1, 2))
        if not up:
            last = err.strip().splitlines()[-1] if err.strip() else ""
            if sd.split("/")[-1] not in last:
                res.note(f"{name}: refusal does not name the file: {last[:200]}", fail=True)
        if name == "orphan_tmp_files":
            # the daemon's own temporary files are `.<name>.tmp` (src/files.rs): those must go;
            # other *.tmp names are not its own and are left alone by design
            ours = [p for p in ["models/.model-00000000000000000005.nmd.tmp", ".version.tmp"]
                    if os.path.exists(os.path.join(sd, p))]
            if ours:
                res.note(f"orphan .tmp files of the daemon's pattern not cleaned at start: {ours}", fail=True)
            else:
                log("orphan_tmp_files: the daemon's .<name>.tmp files were removed at start; "
                    "model-….nmd.tmp and version.tmp (not its pattern) were left alone")
        if name == "version_behind_models" and up:
            # a replay on it must not issue a version that exists already
            cfg2 = write_config(work, free_port(), source="replay", state=f"sd-{name}")
            r = Daemon(args.bin, ["replay", STREAM, "--config", cfg2], work, None, "vb-replay")
            rc2 = r.wait(300)
            issued = [int(v) for v in re.findall(r"swapped in version=(\d+)", r.stderr())]
            log(f"{name}: replay on it: exit {rc2}, versions issued {issued}")
            if issued and min(issued) <= newest_v:
                res.note(f"{name}: version counter behind the stored models reissued v{min(issued)}", fail=True)
        if name == "torn_last_scores_line":
            _, torn = read_jsonl(os.path.join(sd, "scores.jsonl"))
            if torn:
                res.note("torn last scores line not cut at start", fail=True)
        if name == "model_unreadable_0000" and root:
            res.note("model_unreadable_0000: running as root, a mode-0000 file is still readable; the probe does not bite")
        if name == "all_models_corrupt" and up and "no stored model" not in err.lower() and "none" not in err.lower():
            res.note("all models corrupt: the log does not say that no model loaded")
    res.extra.update(outcomes)
    # a second daemon on the same state directory
    res.probes += 1
    sd = os.path.join(work, "sd-second")
    shutil.copytree(golden, sd)
    p1 = free_port()
    cfg1 = write_config(work, p1, source="http", state="sd-second")
    a = Daemon(args.bin, ["run", "--config", cfg1], work, p1, "first")
    try:
        if not a.wait_http(20):
            res.note("second-daemon probe: the first daemon did not start", fail=True)
        else:
            p2 = free_port()
            cfg2 = write_config(work, p2, source="http", state="sd-second")
            b = Daemon(args.bin, ["run", "--config", cfg2], work, p2, "second")
            rc = b.wait(20)
            if rc is None:
                b.kill9()
                res.note("a second daemon on the same state dir kept running", fail=True)
            else:
                err = b.stderr()
                if rc != 2 or str(a.pid) not in err:
                    res.note(f"second daemon: exit {rc}, pid {a.pid} named: {str(a.pid) in err}: {err[-300:]}", fail=True)
                else:
                    log(f"second daemon: exit 2 naming pid {a.pid}: {err.strip().splitlines()[-1][:160]}")
            if not a.alive():
                res.note("the first daemon died when a second one started", fail=True)
    finally:
        rc = a.stop()
        if crashed(rc, a.stderr()):
            res.crashes += 1


# ----------------------------------------------------------------------------------------------
# 4. http_fuzz

def fuzz_requests(rng, n, port):
    """n raw requests: (kind, bytes, expect_answer)."""
    host = f"Host: 127.0.0.1:{port}\r\n".encode()
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    good_ev = json.dumps({"id": "f1", "ts": 1767225600000, "x": [0.1] * 57}).encode()
    paths = ["/", "/healthz", "/readyz", "/metrics", "/v1/score", "/v1/model", "/v1/models",
             "/v1/model/rollback", "/v1/events/unlabeled", "/v1/events/positive",
             "/v1/events/negative", "/v1/events/spam", "/v1/events/", "/v1/events/%00",
             "/v1/events/unlabeled/../positive", "/../../etc/passwd", "/v1/score?x=" + "a" * 5000,
             "//v1//score", "/v1/SCORE", "/%ff%fe", "/v1/events/%2e%2e/", "*", "http://evil/v1/score",
             "/v1/score#frag", "/" + "a/" * 2000, "/v1/model?version=-1", "/\u00e9"]
    methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT",
               "get", "FOO", "G\x00T", "POST " * 3, "", "X" * 10000]
    kinds = ["random_method_path", "bad_content_length", "chunked_garbage", "header_flood",
             "huge_header", "pipelined", "partial_head", "random_bytes", "http09", "http2_preface",
             "bad_version", "te_and_cl", "body_fuzz", "bad_header_line", "expect_100",
             "bad_auth", "absolute_uri", "slow_partial_body", "unicode_header", "many_small_pipelined"]
    for _ in range(n):
        k = rng.choice(kinds)
        m, p = rng.choice(methods), rng.choice(paths)
        if k == "random_method_path":
            body = rng.choice([b"", good_ev, b"[" + good_ev + b"]", rng.randbytes(rng.randint(0, 200))])
            req = f"{m} {p} HTTP/1.1\r\n".encode("utf-8", "replace") + host + (auth if rng.random() < .5 else b"") + \
                b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body
            yield k, req, True
        elif k == "bad_content_length":
            cl = rng.choice(["-1", "abc", "99999999999999999999999", "1, 2", "0x10", " 5", "5 ", "",
                             "18446744073709551615", "4194305", "100000000"])
            body = good_ev[:rng.randint(0, len(good_ev))]
            req = f"POST /v1/score HTTP/1.1\r\nContent-Length: {cl}\r\nContent-Length: {rng.randint(0, 9)}\r\n".encode() \
                if rng.random() < .3 else f"POST /v1/score HTTP/1.1\r\nContent-Length: {cl}\r\n".encode()
            yield k, req + host + b"Connection: close\r\n\r\n" + body, False
        elif k == "chunked_garbage":
            chunks = rng.choice([b"zz\r\nabc\r\n0\r\n\r\n", b"ffffffffffffffffff\r\n", b"5\r\nabc\r\n",
                                 b"-1\r\n\r\n", b"3;ext=" + b"e" * 9000 + b"\r\nabc\r\n0\r\n\r\n",
                                 b"1\r\n{\r\n0\r\nTrailer: " + b"t" * 70000 + b"\r\n\r\n",
                                 rng.randbytes(100)])
            yield k, b"POST /v1/score HTTP/1.1\r\n" + host + b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n" + chunks, False
        elif k == "header_flood":
            hs = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * rng.randint(0, 20)) for i in range(rng.choice([100, 1000, 5000])))
            yield k, b"GET /healthz HTTP/1.1\r\n" + host + hs + b"Connection: close\r\n\r\n", True
        elif k == "huge_header":
            size = rng.choice([16 * 1024, 100 * 1024, 1024 * 1024])
            yield k, b"GET /v1/model HTTP/1.1\r\n" + host + b"X-Big: " + b"a" * size + b"\r\nConnection: close\r\n\r\n", True
        elif k == "pipelined":
            one = b"GET /healthz HTTP/1.1\r\n" + host + b"\r\n"
            two = b"POST /v1/score HTTP/1.1\r\n" + host + b"Content-Length: %d\r\n\r\n" % len(good_ev) + good_ev
            yield k, one + two + one + b"GET /v1/model HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n", True
        elif k == "many_small_pipelined":
            one = b"GET /healthz HTTP/1.1\r\n" + host + b"\r\n"
            yield k, one * rng.randint(10, 200) + b"GET /healthz HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n", True
        elif k == "partial_head":
            full = b"GET /healthz HTTP/1.1\r\n" + host + b"X-A: b\r\n\r\n"
            yield k, full[:rng.randint(1, len(full) - 2)], False
        elif k == "random_bytes":
            yield k, rng.randbytes(rng.randint(1, 4000)), False
        elif k == "http09":
            yield k, b"GET /healthz\r\n", False
        elif k == "http2_preface":
            yield k, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + rng.randbytes(50), False
        elif k == "bad_version":
            v = rng.choice(["HTTP/9.9", "HTTP/1.1x", "HTTP/", "HTTP/1.1 extra", "http/1.1", "HTTP/0.1"])
            yield k, f"GET /healthz {v}\r\n".encode() + host + b"Connection: close\r\n\r\n", False
        elif k == "te_and_cl":
            yield k, b"POST /v1/score HTTP/1.1\r\n" + host + b"Content-Length: 4\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n", False
        elif k == "body_fuzz":
            b = bytearray(rng.choice([good_ev, b"[" + good_ev + b"," + good_ev + b"]"]))
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            p = rng.choice(["/v1/score", "/v1/events/unlabeled", "/v1/events/positive"])
            yield k, f"POST {p} HTTP/1.1\r\n".encode() + host + auth + b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(b) + bytes(b), True
        elif k == "bad_header_line":
            bad = rng.choice([b"NoColon\r\n", b": empty-name\r\n", b"X Y: z\r\n", b"X-A:\x00\x01\r\n",
                              b" folded: line\r\n", b"X-A: b\n", b"\r\n\r\n\r\n", b"Host: a\r\nHost: b\r\n"])
            yield k, b"GET /healthz HTTP/1.1\r\n" + host + bad + b"Connection: close\r\n\r\n", False
        elif k == "expect_100":
            yield k, b"POST /v1/score HTTP/1.1\r\n" + host + b"Expect: 100-continue\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(good_ev) + good_ev, True
        elif k == "bad_auth":
            a = rng.choice([b"Bearer", b"Bearer ", b"Bearer " + b"x" * 10000, b"Basic Zm9vOmJhcg==",
                            b"Bearer " + TOKEN.encode() + b"x", b"bearer " + TOKEN.encode(), b"\xff\xfe"])
            yield k, b"POST /v1/model/rollback HTTP/1.1\r\n" + host + b"Authorization: " + a + b"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", True
        elif k == "absolute_uri":
            yield k, b"GET http://127.0.0.1/healthz HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n", True
        elif k == "slow_partial_body":
            yield k, b"POST /v1/score HTTP/1.1\r\n" + host + b"Content-Length: 1000\r\n\r\n" + good_ev[:20], False
        elif k == "unicode_header":
            yield k, b"GET /healthz HTTP/1.1\r\n" + host + "X-Ü: ☃\r\n".encode() + b"Connection: close\r\n\r\n", True


def send_raw(port, data, expect, timeout):
    """Sends data, reads until close or timeout; returns (statuses, dropped_without_answer)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    got = b""
    try:
        try:
            s.sendall(data)
        except OSError:
            pass  # the server may close early (e.g. on a huge header): read what it said
        s.settimeout(timeout if expect else 0.3)
        end = time.time() + (timeout if expect else 0.3)
        while time.time() < end:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                break
            if not chunk:
                break
            got += chunk
    finally:
        s.close()
    return [int(x) for x in re.findall(rb"HTTP/1\.[01] (\d{3})", got)], got


def run_http_fuzz(args, res, work):
    n = 600 if args.quick else 3200
    port = free_port()
    cfg = write_config(work, port, source="replay", state="fz", **{"http.admin_token_env": "PROBE_ADMIN_TOKEN"})
    d = Daemon(args.bin, ["run", "--config", cfg], work, port, "fuzz")
    rng = random.Random(args.seed)
    statuses = {}
    bad5xx, health_fail = [], 0
    no_answer = {}
    try:
        if not d.wait_http() or wait_model(port, 60) is None:
            res.note("fuzz daemon did not start or trained no model: " + d.stderr()[-300:], fail=True)
            return
        for i, (kind, req, expect) in enumerate(fuzz_requests(rng, n, port)):
            res.probes += 1
            try:
                sts, _ = send_raw(port, req, expect, 5)
            except OSError as e:
                sts = []
                if not d.alive():
                    break
            if expect and not sts:
                no_answer[kind] = no_answer.get(kind, 0) + 1
            for st in sts:
                statuses[st] = statuses.get(st, 0) + 1
                if st >= 500 and st not in (503, 408):
                    bad5xx.append((kind, st, req[:120]))
            if (i + 1) % 100 == 0:
                try:
                    st, _ = http_req(port, "GET", "/healthz", timeout=5)
                except OSError:
                    st = None
                if st != 200:
                    health_fail += 1
                    res.note(f"/healthz after {i + 1} fuzz requests: {st}", fail=True)
                if not d.alive():
                    break
        stop_checked(d, res, "fuzz daemon")
    finally:
        if d.alive():
            d.kill9()
    for kind, st, head in bad5xx[:10]:
        res.note(f"{kind}: {st} for {head!r}", fail=True)
    res.extra["5xx_other"] = len(bad5xx)
    res.extra["no_answer"] = sum(no_answer.values())
    if no_answer:
        res.note(f"complete requests closed without an answer, by kind: {no_answer}")
    res.extra["healthz_failures"] = health_fail
    res.extra["statuses"] = "/".join(f"{k}:{v}" for k, v in sorted(statuses.items()))


# ----------------------------------------------------------------------------------------------
# 5. model_files

def mutate_model(rng, blob):
    """One mutation of a framed model file; half of them fix the length and CRC-32 up so the
    payload decoder (not just the checksum) is exercised."""
    b = bytearray(blob)
    kind = rng.choice(["flip_bit", "set_byte", "truncate", "extend", "insert", "delete", "splice",
                       "header_field", "nan_f64", "big_varint", "zero_run"])
    fix = rng.random() < 0.5
    payload = bytearray(b[HDR:])
    if kind == "flip_bit":
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        payload = bytearray(b[HDR:])
    elif kind == "set_byte":
        for _ in range(rng.randint(1, 8)):
            payload[rng.randrange(len(payload))] = rng.choice([0, 0xFF, 0x80, 0x7F, 0xFB, 0xFC, 0xFD, rng.randrange(256)])
    elif kind == "truncate":
        payload = payload[:rng.randrange(len(payload))]
    elif kind == "extend":
        payload += rng.randbytes(rng.randint(1, 4096))
    elif kind == "insert":
        i = rng.randrange(len(payload))
        payload[i:i] = rng.randbytes(rng.randint(1, 16))
    elif kind == "delete":
        i = rng.randrange(len(payload))
        del payload[i:i + rng.randint(1, 64)]
    elif kind == "splice":
        i, j = rng.randrange(len(payload)), rng.randrange(len(payload))
        payload[i:i + 32] = payload[j:j + 32]
    elif kind == "header_field":
        i = rng.randrange(HDR)
        b[i] = rng.randrange(256)
        if rng.random() < .5:
            b[13:21] = struct.pack("<Q", rng.choice([0, 1, 2**32, 2**62, 2**64 - 1, len(payload) + 1]))
        fix = False
        return bytes(b), kind
    elif kind == "nan_f64":
        # overwrite an 8-byte aligned-looking slot with NaN/inf/huge values
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(max(1, len(payload) - 8))
            payload[i:i + 8] = struct.pack("<d", rng.choice([float("nan"), float("inf"), -float("inf"), 1e308, -0.0, 5e-324]))
        fix = True
    elif kind == "big_varint":
        # bincode varints: 0xFB/0xFC/0xFD prefixes announce u16/u32/u64 lengths
        i = rng.randrange(len(payload))
        payload[i:i + 9] = bytes([0xFD]) + struct.pack("<Q", rng.choice([2**31, 2**40, 2**63, 2**64 - 1]))
        fix = True
    elif kind == "zero_run":
        i = rng.randrange(len(payload))
        payload[i:i + rng.randint(1, 256)] = bytes(rng.randint(1, 256))
    if fix:
        hdr = bytearray(b[:HDR])
        hdr[13:21] = struct.pack("<Q", len(payload))
        hdr[21:25] = struct.pack("<I", zlib.crc32(bytes(payload)) & 0xFFFFFFFF)
        return bytes(hdr) + bytes(payload), kind + "+crc"
    return bytes(b[:HDR]) + bytes(payload), kind


def run_model_files(args, res, work):
    n = 300 if args.quick else 2000
    heart = os.path.join(DATA, "heart_statlog.csv")
    m1 = os.path.join(work, "usmo.model")
    m2 = os.path.join(work, "tfpl.model")
    for cmd in ([args.bin, "train", "--algo", "usmo", "--data", heart, "--pu-labeled-fraction", "0.2",
                 "--seed", "1", "--prior", "0.44", "--lambda", "0.01", "--kernel", "rbf", "--out", m1, "--quiet"],
                [args.bin, "train", "--algo", "tfpl", "--data", heart, "--tau", "0.1", "--out", m2, "--quiet"]):
        p = subprocess.run(cmd, capture_output=True, timeout=120)
        if p.returncode != 0:
            res.note(f"train failed: {' '.join(cmd)}: {p.stderr[-300:]!r}", fail=True)
            return
    # a daemon-written model (with provenance) and a 57-feature data file for it
    golden = make_state_dir(args, work)
    m3 = os.path.join(golden, "models", sorted(n for n in os.listdir(os.path.join(golden, "models"))
                                               if n.endswith(".nmd"))[0])
    spam = os.path.join(work, "spam50.csv")
    with gzip.open(os.path.join(DATA, "spambase.csv.gz"), "rt") as f, open(spam, "w") as g:
        for i, line in enumerate(f):
            if i > 50:
                break
            g.write(line)
    bases = [(m1, heart), (m2, heart), (m3, spam)]
    blobs = [(open(m, "rb").read(), dfile) for m, dfile in bases]
    rng = random.Random(args.seed)
    codes, kinds_crash = {}, []
    mpath = os.path.join(work, "mutant.model")
    hangs = 0
    for i in range(n):
        blob, dfile = blobs[i % len(blobs)] if i % 10 else blobs[2 if i % 20 == 0 else 0]
        mutant, kind = mutate_model(rng, blob)
        with open(mpath, "wb") as f:
            f.write(mutant)
        res.probes += 1
        try:
            p = subprocess.run([args.bin, "score", "--model", mpath, "--data", dfile],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
            rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            hangs += 1
            rc, err = "timeout", ""
            keep = os.path.join(work, f"hang-{i}.model")
            shutil.copy(mpath, keep)
            res.note(f"score hung > 30 s on a {kind} mutant (kept as {keep})", fail=True)
        codes[rc] = codes.get(rc, 0) + 1
        if rc != "timeout" and (crashed(rc, err) or rc not in (0, 1, 2)):
            res.crashes += 1
            keep = os.path.join(work, f"crash-{i}.model")
            shutil.copy(mpath, keep)
            kinds_crash.append(kind)
            if res.crashes <= 5:
                res.note(f"score exit {rc} on a {kind} mutant ({keep}): {err.strip()[-300:]}", fail=True)
        elif rc in (1, 2) and not err.strip():
            res.note(f"score exit {rc} without a message ({kind})", fail=True)
    res.extra["exit_codes"] = "/".join(f"{k}:{v}" for k, v in sorted(codes.items(), key=str))
    res.extra["hangs"] = hangs


# ----------------------------------------------------------------------------------------------
# 6. connections

def raise_nofile(want):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    for target in (want, hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), max(hard, target)))
            break
        except (ValueError, OSError):
            continue
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def run_connections(args, res, work):
    want = 5000 if args.quick else 20000
    limit = raise_nofile(want + 200)
    target = min(want, limit - 100)
    port = free_port()
    cfg = write_config(work, port, source="replay", state="cn")
    d = Daemon(args.bin, ["run", "--config", cfg], work, port, "conn")
    socks = []
    try:
        if not d.wait_http() or wait_model(port, 60) is None:
            res.note("daemon did not start: " + d.stderr()[-300:], fail=True)
            return
        with open(f"/proc/{d.pid}/limits") as f:
            lim = [l for l in f if "open files" in l]
        log(f"daemon {lim[0].strip() if lim else ''}; opening {target} idle connections (own limit {limit})")
        t0 = time.time()
        refused = 0
        half = b"GET /healthz HTTP/1.1\r\nHost: x\r\n"  # half of them send an unfinished head
        for i in range(target):
            s = socket.socket()
            s.setblocking(False)
            try:
                s.connect(("127.0.0.1", port))
            except BlockingIOError:
                pass
            except OSError:
                refused += 1
                s.close()
                continue
            socks.append(s)
            if i % 2 == 0:
                try:
                    s.send(half)
                except OSError:
                    pass
        log(f"{len(socks)} connections attempted in {time.time() - t0:.1f} s ({refused} refused at once)")
        times, fails = [], 0
        for i in range(20):
            t = time.time()
            try:
                st, _ = http_req(port, "GET", "/healthz", timeout=5)
            except OSError:
                st = None
            dt = time.time() - t
            times.append(dt)
            if st != 200 or dt > 1.0:
                fails += 1
            time.sleep(0.25)
        # how many of ours are still open (not closed by the server)
        open_n = 0
        for s in socks:
            try:
                if s.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b"":
                    open_n += 1  # data waiting (not expected): still open
            except BlockingIOError:
                open_n += 1  # nothing to read and not closed: still open
            except OSError:
                pass  # reset, refused or never connected
        res.probes = len(socks) + 20
        res.extra["held"] = len(socks)
        res.extra["still_open_at_end"] = open_n
        res.extra["healthz_max_s"] = round(max(times), 3)
        res.extra["healthz_over_1s"] = fails
        log(f"/healthz: max {max(times):.3f} s, median {sorted(times)[10]:.3f} s; {open_n} of ours still open")
        if fails:
            res.note(f"{fails} of 20 /healthz over 1 s or failed while holding {len(socks)} connections", fail=True)
        if "Too many open files" in d.stderr():
            res.note("daemon log says 'Too many open files'", fail=True)
        for s in socks:
            s.close()
        socks = []
        # the daemon still works afterwards
        st, _ = http_req(port, "GET", "/v1/model", timeout=5)
        if st != 200:
            res.note(f"GET /v1/model after the flood: {st}", fail=True)
        stop_checked(d, res, "daemon")
    finally:
        for s in socks:
            s.close()
        if d.alive():
            d.kill9()


# ----------------------------------------------------------------------------------------------
# 7. stalled_uploads

def run_stalled_uploads(args, res, work):
    n = 30 if args.quick else 100
    port = free_port()
    cfg = write_config(work, port, source="replay", state="su", **{"http.request_timeout": "3s"})
    d = Daemon(args.bin, ["run", "--config", cfg], work, port, "stall")
    try:
        if not d.wait_http() or wait_model(port, 60) is None:
            res.note("daemon did not start: " + d.stderr()[-300:], fail=True)
            return
        if not wait_replay_end(d):
            res.note("the replay source did not end", fail=True)
        # warm up the request path once (a small score request), then let it settle
        ev = stream_records(1)[0]["payload"].encode()
        http_req(port, "POST", "/v1/score", body=ev, headers={"Content-Type": "application/json"})
        rss_start = vmrss_kb(d.pid)
        time.sleep(5)
        idle_samples = []
        for _ in range(10):
            idle_samples.append(vmrss_kb(d.pid))
            time.sleep(0.2)
        idle = sorted(idle_samples)[len(idle_samples) // 2]
        size = 4194304 - 1024
        head = (f"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                f"Content-Length: {size}\r\n\r\n").encode()
        body = b"[" + b" " * (size - 12)  # all but 10 bytes (with the opening bracket)
        answers = [None] * n
        sent = [0] * n

        def stall(i):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=60)
                s.sendall(head)
                s.sendall(body)
                sent[i] = 1
                got = b""
                while True:
                    c = s.recv(4096)
                    if not c:
                        break
                    got += c
                    if b"\r\n\r\n" in got:
                        break
                m = re.match(rb"HTTP/1\.1 (\d{3})", got)
                answers[i] = int(m.group(1)) if m else "closed"
                s.close()
            except OSError as e:
                answers[i] = f"error {e.__class__.__name__}"
        peak = idle
        threads = [threading.Thread(target=stall, args=(i,), daemon=True) for i in range(n)]
        t0 = time.time()
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads) and time.time() - t0 < 120:
            r = vmrss_kb(d.pid)
            if r:
                peak = max(peak, r)
            time.sleep(0.1)
        done_at = time.time() - t0
        after = []
        for _ in range(100):
            r = vmrss_kb(d.pid)
            after.append(r)
            peak = max(peak, r or 0)
            time.sleep(0.1)
        final = after[-1]
        later = []
        for _ in range(20):  # how it goes on (reported only)
            later.append(vmrss_kb(d.pid))
            time.sleep(0.5)
        codes = {}
        for a in answers:
            codes[a] = codes.get(a, 0) + 1
        res.probes = n
        res.extra["answers"] = "/".join(f"{k}:{v}" for k, v in codes.items())
        res.extra["idle_MB"] = round(idle / 1024, 1)
        res.extra["peak_MB"] = round(peak / 1024, 1)
        res.extra["after_10s_MB"] = round(final / 1024, 1)
        log(f"{n} stalled uploads answered after {done_at:.1f} s: {codes}; RSS idle {idle / 1024:.1f} MB, "
            f"peak {peak / 1024:.1f} MB, 10 s later {final / 1024:.1f} MB "
            f"(1 s: {after[9] / 1024:.1f}, 5 s: {after[49] / 1024:.1f}, 20 s: {later[-1] / 1024:.1f}; "
            f"RSS right after the warm-up {rss_start / 1024:.1f} MB)")
        if final > idle * 1.10:
            res.note(f"RSS {final / 1024:.1f} MB 10 s after the 408s, idle {idle / 1024:.1f} MB (> +10 %)", fail=True)
        if codes.get(408, 0) != n:
            res.note(f"not every stalled upload got 408: {codes}", fail=True)
            res.lost += sum(v for k, v in codes.items() if k != 408 and not isinstance(k, int))
        stop_checked(d, res, "daemon")
    finally:
        if d.alive():
            d.kill9()


# ----------------------------------------------------------------------------------------------
# 8. kill9

def run_kill9(args, res, work):
    kills = 10 if args.quick else 50
    rng = random.Random(args.seed)
    over = {"retrain.every_events": 150, "retrain.min_positive": 20, "retrain.min_unlabeled": 100,
            "retrain.min_negative": 30, "state.keep_models": 3}
    # one clean run to learn how long a replay takes
    cfg = write_config(work, free_port(), source="replay", state="k9-probe", **over)
    d = Daemon(args.bin, ["replay", STREAM, "--config", cfg], work, None, "k9-time")
    t0 = time.time()
    rc = d.wait(600)
    full = time.time() - t0
    if rc != 0:
        res.note(f"reference replay failed: exit {rc}: {d.stderr()[-300:]}", fail=True)
        return
    swaps = d.stderr().count("swapped in")
    log(f"reference replay: {full:.1f} s, {swaps} models swapped in")
    sd = os.path.join(work, "k9")
    os.makedirs(sd)
    cfg = write_config(work, free_port(), source="replay", state="k9", **over)
    starts_failed, corrupt_files, wrong_resume, served_bad = 0, 0, 0, 0
    resumed = 0
    for i in range(kills + 1):
        newest_valid = None
        if os.path.isdir(os.path.join(sd, "models")):
            for name in sorted(os.listdir(os.path.join(sd, "models")), reverse=True):
                if not name.endswith(".nmd"):
                    continue
                info, rc_i, err_i = inspect_model(args.bin, os.path.join(sd, "models", name))
                if info is None:
                    corrupt_files += 1
                    res.note(f"kill {i}: stored model {name} does not load: {err_i.strip()[:200]}", fail=True)
                    continue
                if newest_valid is None:
                    newest_valid = int(name.split("-")[1].split(".")[0])
        d = Daemon(args.bin, ["replay", STREAM, "--config", cfg], work, None, f"k9-{i}")
        if i == kills:
            rc = d.wait(600)  # the last run goes to the end
        else:
            time.sleep(rng.uniform(0.05, full * 1.1))
            rc = d.p.poll()
            if rc is None:
                rc = d.kill9()
                rc = "killed"
        err = d.stderr()
        res.probes += 1
        if crashed(rc if rc != "killed" else 0, err):
            res.crashes += 1
            res.note(f"run {i}: crash exit {rc}: {err[-400:]}", fail=True)
        if rc not in ("killed", 0):
            starts_failed += 1
            res.note(f"run {i}: exit {rc}: {err.strip().splitlines()[-1:]}", fail=True)
        m = re.search(r"resumed the stored model.*?version=(\d+)", err)
        if newest_valid is not None:
            if m:
                resumed += 1
                if int(m.group(1)) != newest_valid:
                    wrong_resume += 1
                    res.note(f"run {i}: resumed v{m.group(1)}, newest valid stored is v{newest_valid}", fail=True)
            elif "HTTP API listening" in err and "model file not resumed" not in err and rc != "killed":
                wrong_resume += 1
                res.note(f"run {i}: a valid stored model v{newest_valid} was not resumed", fail=True)
        if "model file not resumed" in err:
            served_bad += 0
            res.note(f"run {i}: skipped a stored model: "
                     + [l for l in err.splitlines() if "not resumed" in l][0][-200:])
    scores, torn = read_jsonl(os.path.join(sd, "scores.jsonl"))
    if torn:
        res.note(f"{torn} torn lines left in the scores file after the restarts", fail=True)
    res.extra["kills"] = kills
    res.extra["resumed"] = resumed
    res.extra["failed_starts"] = starts_failed
    res.extra["corrupt_model_files"] = corrupt_files
    res.extra["wrong_resume"] = wrong_resume
    res.extra["torn_score_lines"] = torn


# ----------------------------------------------------------------------------------------------

CLASSES = {
    "payloads": run_payloads,
    "stream_lines": run_stream_lines,
    "state_dirs": run_state_dirs,
    "http_fuzz": run_http_fuzz,
    "model_files": run_model_files,
    "connections": run_connections,
    "stalled_uploads": run_stalled_uploads,
    "kill9": run_kill9,
}


def find_bin(arg):
    if arg:
        return os.path.abspath(arg)
    for c in (os.path.join(REPO, "target", "release", "neyman"), shutil.which("neyman")):
        if c and os.path.exists(c):
            return os.path.abspath(c)
    sys.exit("no neyman binary: pass --bin PATH (default target/release/neyman or neyman on PATH)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("classes", nargs="*", metavar="CLASS", help=", ".join(CLASSES))
    ap.add_argument("--bin", help="the neyman binary (default target/release/neyman, else neyman on PATH)")
    ap.add_argument("--quick", action="store_true", help="fewer probes per class (about 2 minutes in all)")
    ap.add_argument("--json", action="store_true", help="one JSON object per class on stdout")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = ap.parse_args()
    for c in args.classes:
        if c not in CLASSES:
            ap.error(f"unknown class {c!r}; one of {', '.join(CLASSES)}")
    args.bin = find_bin(args.bin)
    classes = args.classes or list(CLASSES)
    failed = False
    t_all = time.time()
    for c in classes:
        work = tempfile.mkdtemp(prefix=f"neyman-probe-{c}-")
        res = Result(c)
        t0 = time.time()
        log(f"{c}: working in {work}")
        try:
            CLASSES[c](args, res, work)
        except KeyboardInterrupt:
            kill_all()
            raise
        except Exception as e:
            import traceback
            traceback.print_exc()
            res.note(f"harness error: {e!r}", fail=True)
        finally:
            kill_all()
        res.extra["seconds"] = round(time.time() - t0, 1)
        if args.json:
            print(json.dumps(res.as_json()), flush=True)
        else:
            print(res.line(), flush=True)
        failed |= not res.ok()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"{c}: kept {work}")
    log(f"all classes: {time.time() - t_all:.0f} s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
