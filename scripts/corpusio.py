"""File helpers shared by the corpus builders and the model-file writer.

write_atomic: write to a temporary file in the same directory, fsync, rename
over the target; on any error the temporary is removed and the target is
untouched.  MANIFEST files (written last by the corpus builders) list
"# key: value" lines and "sha256  name" lines."""

import hashlib
import os
import tempfile


def write_atomic(path, data):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp.", dir=d)
    try:
        # mkstemp makes the file 0600; give it the mode open() would (0666 less the umask), as ll's
        # own files have, so a shared data directory stays readable
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def combined_sha(digests):
    """One sha256 over {name: hex digest}, independent of dict order."""
    h = hashlib.sha256()
    for name in sorted(digests):
        h.update(("%s  %s\n" % (digests[name], name)).encode())
    return h.hexdigest()


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(out):
    """The MANIFEST of an output directory as {key: value, "files": {name: sha256}}, or None."""
    try:
        with open(os.path.join(out, "MANIFEST"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    info = {"files": {}}
    for ln in lines:
        if ln.startswith("# "):
            k, _, v = ln[2:].partition(": ")
            info[k] = v
        elif ln.strip():
            digest, _, name = ln.partition("  ")
            info["files"][name] = digest
    return info
