"""Section 7 (docker-inputs): every compile-time input the code reads is COPYed by the Dockerfile and
let through .dockerignore; every BIN compose builds is copied out of the builder stage."""
import glob
import os
import re

import yaml

from .common import ROOT, fail, read, rel


# ------------------------------------------------------------------ Dockerfile inputs
def cmd_docker_inputs():
    df = read("deploy/docker/Dockerfile")
    ignore = [line.strip() for line in read(".dockerignore").splitlines() if line.strip() and not line.startswith("#")]
    copies = re.findall(r"^COPY (?!--from)(.+?) \S+$", df, re.M)
    copied = set()
    for c in copies:
        copied |= set(c.split())
    need = set()
    for rs in glob.glob(os.path.join(ROOT, "crates/**/*.rs"), recursive=True) + \
            glob.glob(os.path.join(ROOT, "services/**/*.rs"), recursive=True):
        src = open(rs, encoding="utf-8").read()
        for m in re.finditer(r'(include_str|include_bytes|migrate)!\(\s*"([^"]+)"', src):
            # include_str! is relative to the source file; sqlx's migrate! to the crate's manifest.
            base = os.path.dirname(rs)
            if m.group(1) == "migrate":
                while not os.path.exists(os.path.join(base, "Cargo.toml")):
                    base = os.path.dirname(base)
            target = os.path.normpath(os.path.join(base, m.group(2)))
            r = rel(target)
            if r.split(os.sep)[0] not in ("crates", "services"):
                need.add(r)
    for r in sorted(need):
        covered = any(r == c.rstrip("/") or r.startswith(c.rstrip("/") + "/") for c in copied)
        if not covered:
            fail(f"the code embeds {r} at compile time but deploy/docker/Dockerfile does not COPY it")
        allowed = any(i == "!" + r or i == "!" + r + "/" or ("!" + r).startswith(i.rstrip("/") + "/") and i.startswith("!")
                      for i in ignore)
        if not allowed:
            fail(f"the code embeds {r} at compile time but .dockerignore does not let it through")
    print(f"  compile-time inputs outside the crates: {sorted(need)}; COPY and .dockerignore cover them")
    # Every BIN compose builds is copied out of the builder stage (else: COPY --from=builder fails).
    built = set(re.findall(r"target/release/([\w-]+)", df))
    compose = yaml.safe_load(open(os.path.join(ROOT, "docker-compose.yml")))
    bins = {(svc.get("build") or {}).get("args", {}).get("BIN") for svc in compose["services"].values()} - {None}
    for b in sorted(bins - built):
        fail(f"docker-compose.yml builds BIN={b} but deploy/docker/Dockerfile does not copy target/release/{b} to /out")
    for b in sorted(bins):
        if not os.path.exists(os.path.join(ROOT, "services", b, "Cargo.toml")):
            print(f"  NOTE BIN={b}: services/{b} is not in the tree yet")
    print(f"  binaries copied from the builder: {sorted(built)} cover compose's BINs {sorted(bins)}")
